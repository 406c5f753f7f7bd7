package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Value;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class JcsTest {
  /** Every vector of clients/go/fingerprint/testdata/vectors.json: the preimage byte for byte, then the hash. */
  @TestFactory
  Stream<DynamicTest> fingerprintVectors() throws IOException {
    List<Value> vectors = TestData.vectors("vectors.json");
    assertTrue(vectors.size() >= 19);
    return vectors.stream()
        .map(
            v ->
                DynamicTest.dynamicTest(
                    TestData.str(v, "name"),
                    () -> {
                      Value args = v.getStructValue().getFieldsOrThrow("args");
                      Object a = args.hasStructValue() ? args.getStructValue() : null;
                      String method = TestData.str(v, "method");
                      String tenant = TestData.str(v, "tenant");
                      String tool = TestData.str(v, "tool");
                      String version = TestData.str(v, "tool_version");
                      assertEquals(
                          TestData.str(v, "canonical"),
                          Fingerprint.preimage(method, tenant, tool, version, a));
                      assertEquals(
                          TestData.str(v, "fingerprint"),
                          Fingerprint.compute(method, tenant, tool, version, a));
                      if (method.equals(Fingerprint.PREPARE_METHOD)) {
                        assertEquals(
                            TestData.str(v, "fingerprint"),
                            Fingerprint.ofPrepare(tenant, tool, version, a));
                      }
                    }));
  }

  /** 2000+ doubles formatted by the Go reference: Java 17's Double.toString is not enough. */
  @Test
  void numbersMatchTheGoReference() throws IOException {
    int n = 0;
    List<String> failures = new ArrayList<>();
    try (InputStream in = getClass().getResourceAsStream("/jcs-numbers.txt");
        BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        if (line.startsWith("#") || line.isBlank()) {
          continue;
        }
        String[] parts = line.split(" ");
        double d = Double.longBitsToDouble(Long.parseUnsignedLong(parts[0], 16));
        String got = Jcs.formatNumber(d);
        if (!got.equals(parts[1])) {
          failures.add(parts[0] + ": want " + parts[1] + ", got " + got);
        }
        n++;
      }
    }
    assertTrue(n > 2000);
    assertEquals(List.of(), failures);
  }

  @Test
  void numberLayout() {
    assertEquals("0", Jcs.formatNumber(-0.0));
    assertEquals("4900", Jcs.formatNumber(4900.0));
    assertEquals("100000000000000000000", Jcs.formatNumber(1e20));
    assertEquals("1e+21", Jcs.formatNumber(1e21));
    assertEquals("0.000001", Jcs.formatNumber(1e-6));
    assertEquals("1e-7", Jcs.formatNumber(1e-7));
    assertEquals("5e-324", Jcs.formatNumber(Double.MIN_VALUE));
    assertEquals("1.7976931348623157e+308", Jcs.formatNumber(Double.MAX_VALUE));
    assertEquals("2e-323", Jcs.formatNumber(2e-323)); // Double.toString says 1.98E-323
    assertEquals("-1.5", Jcs.formatNumber(-1.5));
  }

  @Test
  void refusesWhatHasNoCanonicalForm() {
    assertThrows(IllegalArgumentException.class, () -> Jcs.formatNumber(Double.NaN));
    assertThrows(IllegalArgumentException.class, () -> Jcs.formatNumber(Double.POSITIVE_INFINITY));
    assertThrows(IllegalArgumentException.class, () -> Jcs.canonicalize("\ud83d"));
    assertThrows(IllegalArgumentException.class, () -> Jcs.canonicalize("x\ude00"));
    assertThrows(IllegalArgumentException.class, () -> Jcs.canonicalize(new Object()));
    assertThrows(IllegalArgumentException.class, () -> Jcs.canonicalize(Value.getDefaultInstance()));
  }

  @Test
  void sortsByUtf16AndEscapesOnlyWhatJcsEscapes() {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("\ud83d\ude00", 1);
    m.put("\ufb33", 2);
    m.put("b", List.of(true, false, "</script>\u2028/"));
    m.put("a", "\u0000\u001f\"\\\b\t\n\f\r\u007f");
    assertEquals(
        "{\"a\":\"\\u0000\\u001f\\\"\\\\\\b\\t\\n\\f\\r\u007f\",\"b\":[true,false,\"</script>\u2028/\"],"
            + "\"\ud83d\ude00\":1,\"\ufb33\":2}", // U+D83D < U+FB33 as UTF-16 code units
        Jcs.canonicalize(m));
  }
}
