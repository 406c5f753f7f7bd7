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
                      assertEquals(
                          TestData.str(v, "canonical"),
                          IdempotencyKeys.preimage(conversation, round, call, tool, version));
                      String key = IdempotencyKeys.derive(conversation, round, call, tool, version);
                      assertEquals(TestData.str(v, "key"), key);
                      assertEquals(48, key.length());
                    }));
  }

  @Test
  void refusesIncompleteParts() {
    assertThrows(IllegalArgumentException.class, () -> IdempotencyKeys.derive("", 0, "c", "t", ""));
    assertThrows(IllegalArgumentException.class, () -> IdempotencyKeys.derive("x", 0, "c", "", ""));
    assertThrows(IllegalArgumentException.class, () -> IdempotencyKeys.derive("x", -1, "c", "t", ""));
    assertThrows(
        IllegalArgumentException.class, () -> IdempotencyKeys.derive("x", 1L << 53, "c", "t", ""));
    assertNotEquals(
        IdempotencyKeys.derive("x", 0, "c", "t", ""), IdempotencyKeys.derive("x", 1, "c", "t", ""));
    // An empty tool call id is allowed (and differs from a non-empty one).
    assertEquals(
        IdempotencyKeys.derive("x", 0, "", "t", null), IdempotencyKeys.derive("x", 0, null, "t", ""));
    assertNotEquals(
        IdempotencyKeys.derive("x", 0, "", "t", ""), IdempotencyKeys.derive("x", 0, "c", "t", ""));
  }
}
