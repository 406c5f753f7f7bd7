package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.protobuf.Value;
import java.io.IOException;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class IdempotencyKeysTest {
  /** Every vector of clients/go/fingerprint/testdata/key_vectors.json. */
  @TestFactory
  Stream<DynamicTest> keyVectors() throws IOException {
    List<Value> vectors = TestData.vectors("key_vectors.json");
    assertEquals(3, vectors.size());
    return vectors.stream()
        .map(
            v ->
                DynamicTest.dynamicTest(
                    TestData.str(v, "name"),
                    () -> {
                      long round =
                          (long) v.getStructValue().getFieldsOrThrow("round").getNumberValue();
                      String conversation = TestData.str(v, "conversation");
                      String call = TestData.str(v, "tool_call");
                      String tool = TestData.str(v, "tool");
                      String version = TestData.str(v, "tool_version");
                      KeyParts parts =
                          KeyParts.builder()
                              .conversation(conversation)
                              .round(round)
                              .toolCall(call)
                              .tool(tool)
                              .toolVersion(version)
                              .build();
                      assertEquals(TestData.str(v, "canonical"), IdempotencyKeys.preimage(parts));
                      String key = IdempotencyKeys.derive(parts);
                      assertEquals(TestData.str(v, "key"), key);
                      assertEquals(48, key.length());
                    }));
  }

  private static String derive(String conversation, long round, String call, String tool, String version) {
    return KeyParts.builder()
        .conversation(conversation)
        .round(round)
        .toolCall(call)
        .tool(tool)
        .toolVersion(version)
        .derive();
  }

  @Test
  void documentedExample() {
    assertEquals(
        "opk1-rJkGVvywp6LW6RR0IMujcmLimnINH4FvCE5fePK7Odc",
        IdempotencyKeys.derive(
            KeyParts.builder()
                .conversation("conv_7f3a9c")
                .round(3)
                .toolCall("call_Qx81ZpT0")
                .tool("pay_invoice")
                .toolVersion("1")
                .build()));
  }

  @Test
  void refusesIncompleteParts() {
    assertThrows(IllegalArgumentException.class, () -> derive("", 0, "c", "t", ""));
    assertThrows(IllegalArgumentException.class, () -> derive("x", 0, "c", "", ""));
    assertThrows(IllegalArgumentException.class, () -> derive("x", -1, "c", "t", ""));
    assertThrows(IllegalArgumentException.class, () -> derive("x", 1L << 53, "c", "t", ""));
    assertThrows(
        IllegalArgumentException.class,
        () -> KeyParts.builder().conversation("x").tool("t").build()); // no round
    assertNotEquals(derive("x", 0, "c", "t", ""), derive("x", 1, "c", "t", ""));
    // An empty tool call id is allowed (and differs from a non-empty one); null is "".
    assertEquals(derive("x", 0, "", "t", null), derive("x", 0, null, "t", ""));
    assertEquals(
        derive("x", 0, "", "t", ""), KeyParts.builder().conversation("x").round(0).tool("t").derive());
    assertNotEquals(derive("x", 0, "", "t", ""), derive("x", 0, "c", "t", ""));
  }
}
