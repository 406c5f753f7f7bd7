package dev.opledger.client;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * Edit is an approver's change of a call's arguments (approve-with-edit, docs/policy.md): the
 * outcome's operation is the edited one, which the runner followed the link to
 * (Operation.superseded_by) and ran, not the one the agent prepared.
 *
 * @param supersedes the operation the agent prepared: the call as it was made, REJECTED, which
 *     never runs
 * @param args the arguments of the outcome's operation: what ran (or awaits approval, or failed)
 * @param changes the top-level fields the approver changed, in the order canonical JSON (RFC 8785)
 *     gives their names
 */
public record Edit(String supersedes, Struct args, List<Edit.Change> changes) {
  /**
   * Change is one argument an approver changed.
   *
   * @param field the argument's name
   * @param from its value in the call as made (null when added)
   * @param to the value that ran (null when removed)
   * @param added the call as made did not have it
   * @param removed the edited arguments do not have it
   */
  public record Change(String field, Value from, Value to, boolean added, boolean removed) {}

  private static final Map<String, String> VERBS =
      Map.of(
          "succeeded", "this ran",
          "failed", "this did not take effect",
          "outcome_unknown", "this was sent, and its outcome is not known yet",
          "awaiting_approval", "this awaits approval");

  /** Of describes the edit from the arguments of the call as made to args. */
  public static Edit of(String supersedes, Struct original, Struct args) {
    // String's natural order compares UTF-16 code units, as RFC 8785 orders names.
    TreeSet<String> names = new TreeSet<>(original.getFieldsMap().keySet());
    names.addAll(args.getFieldsMap().keySet());
    List<Change> changes = new ArrayList<>();
    for (String name : names) {
      Value from = original.getFieldsMap().get(name);
      Value to = args.getFieldsMap().get(name);
      if (from != null && to != null && Jcs.canonicalize(from).equals(Jcs.canonicalize(to))) {
        continue;
      }
      changes.add(new Change(name, from, to, from == null, to == null));
    }
    return new Edit(supersedes, args, List.copyOf(changes));
  }

  /**
   * Message is the sentence forModel gives the model about the edit ({@link
   * ToolOutcome#MESSAGE_EDITED}), for an outcome of that status about operation operationId.
   */
  public String message(String status, String operationId) {
    List<String> parts = new ArrayList<>();
    for (Change c : changes) {
      parts.add(
          c.field()
              + " from "
              + (c.added() ? "nothing" : Jcs.canonicalize(c.from()))
              + " to "
              + (c.removed() ? "nothing" : Jcs.canonicalize(c.to())));
    }
    return String.format(
        ToolOutcome.MESSAGE_EDITED,
        parts.isEmpty() ? "nothing" : String.join(", ", parts),
        VERBS.getOrDefault(status, ""),
        Jcs.canonicalize(args),
        operationId,
        supersedes);
  }

  /**
   * ForModel is the edit as forModel's "edited" member: {"args", "changes": [{"field", "from",
   * "to"}], "message", "supersedes"}.
   */
  Map<String, Object> forModel(String status, String operationId) {
    List<Object> list = new ArrayList<>();
    for (Change c : changes) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("field", c.field());
      if (!c.added()) {
        m.put("from", c.from());
      }
      if (!c.removed()) {
        m.put("to", c.to());
      }
      list.add(m);
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("args", args);
    m.put("changes", list);
    m.put("message", message(status, operationId));
    m.put("supersedes", supersedes);
    return m;
  }
}
