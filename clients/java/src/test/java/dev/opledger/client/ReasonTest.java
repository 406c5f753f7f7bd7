package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.opledger.v1.ErrorReason;
import java.util.Arrays;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

class ReasonTest {
  /** Reason names every ErrorReason of the proto, without the prefix, and nothing else. */
  @Test
  void everyErrorReasonWithoutItsPrefix() {
    Set<String> proto =
        Arrays.stream(ErrorReason.values())
            .filter(r -> r != ErrorReason.UNRECOGNIZED)
            .map(r -> r.name().substring("ERROR_REASON_".length()))
            .collect(Collectors.toCollection(TreeSet::new));
    Set<String> ours =
        Arrays.stream(Reason.values()).map(Enum::name).collect(Collectors.toCollection(TreeSet::new));
    assertEquals(proto, ours);
    for (Reason r : Reason.values()) {
      assertEquals(r, Reason.fromProto(r.toProto()));
      assertEquals(r, Reason.of(r.name()));
    }
    assertEquals(Reason.UNSPECIFIED, Reason.of(""));
    assertEquals(Reason.UNSPECIFIED, Reason.of("A_REASON_FROM_THE_FUTURE"));
    assertEquals(ErrorReason.ERROR_REASON_IDEMPOTENCY_KEY_REUSED, Reason.IDEMPOTENCY_KEY_REUSED.toProto());
  }
}
