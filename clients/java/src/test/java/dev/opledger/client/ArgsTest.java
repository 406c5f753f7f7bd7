package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import java.io.IOException;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** ArgsTest: a number a double cannot carry as written is refused, as in every opledger client. */
class ArgsTest {
  /** The vectors every client checks: clients/testdata/inexact_numbers.json. */
  @Test
  void inexactNumberVectors() throws IOException {
    Struct root = TestData.shared("inexact_numbers.json");
    List<Value> vectors = root.getFieldsOrThrow("vectors").getListValue().getValuesList();
    assertTrue(vectors.size() > 0);
    for (Value v : vectors) {
      String args = TestData.str(v, "args");
      Value refused = v.getStructValue().getFieldsOrThrow("refused");
      String[] bad = Args.inexactNumber(args);
      if (refused.hasNullValue()) {
        assertNull(bad, args);
        Args.fromJson(args);
        continue;
      }
      assertEquals(refused.getStringValue(), bad == null ? null : bad[0], args);
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Args.fromJson(args), args);
      assertTrue(e.getMessage().contains(refused.getStringValue()), e.getMessage());
    }
  }

  @Test
  void aLongADoubleCannotCarryIsRefused() {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> Args.of(Map.of("id", 1234567890123456789L)));
    assertTrue(e.getMessage().contains("1234567890123456789"), e.getMessage());
    assertEquals(9007199254740992.0, Args.of(Map.of("id", 9007199254740992L)).getFieldsOrThrow("id").getNumberValue());
  }

  /**
   * A member given twice in the model's text was kept with its last value (a charge of 100000
   * where the Go runner refuses the text), and an unpaired surrogate escape went out as '?':
   * both are refused before anything is sent, as in every client.
   */
  @Test
  void textThatCannotTravelAsWrittenIsRefused() {
    String twice = "{\"invoice_id\":\"INV-1\",\"amount_minor\":100,\"amount_minor\":100000,\"currency\":\"EUR\"}";
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Args.fromJson(twice));
    assertTrue(e.getMessage().contains("amount_minor"), e.getMessage());
    String lone = "{\"to\":\"a@example.com\",\"subject\":\"Refund \\ud83d\",\"body\":\"x\"}";
    assertThrows(IllegalArgumentException.class, () -> Args.fromJson(lone));
    Args.fromJson("{\"a\":{\"x\":1},\"b\":{\"x\":2},\"c\":[{\"x\":1},{\"x\":2}],\"s\":\"\\ud83d\\ude00 {x:1}\"}");
  }
}
