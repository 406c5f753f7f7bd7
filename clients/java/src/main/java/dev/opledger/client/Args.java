package dev.opledger.client;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.ListValue;
import com.google.protobuf.NullValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import java.util.Map;

/**
 * Args builds the {@code google.protobuf.Struct} a Prepare carries. Numbers become IEEE-754
 * doubles: send integers above 2^53 as strings.
 */
public final class Args {
  private Args() {}

  /** Of converts a map of JSON-like Java values (see {@link #value}) to a Struct. */
  public static Struct of(Map<String, ?> args) {
    Struct.Builder b = Struct.newBuilder();
    for (Map.Entry<String, ?> e : args.entrySet()) {
      b.putFields(e.getKey(), value(e.getValue()));
    }
    return b.build();
  }

  /** FromJson parses a JSON object, e.g. a model's tool-call arguments, into a Struct. */
  public static Struct fromJson(String json) {
    Struct.Builder b = Struct.newBuilder();
    try {
      JsonFormat.parser().merge(json, b);
    } catch (InvalidProtocolBufferException e) {
      throw new IllegalArgumentException("args must be a JSON object: " + e.getMessage(), e);
    }
    return b.build();
  }

  /**
   * ToJson prints a Struct (args or a result) as canonical JSON (RFC 8785): compact, sorted, and
   * numbers as JavaScript writes them (4900, not 4900.0).
   */
  public static String toJson(Struct s) {
    return Jcs.canonicalize(s);
  }

  /**
   * Value converts null, Boolean, String, Number, Map with string keys, Iterable, or a protobuf
   * Value/Struct/ListValue to a {@code google.protobuf.Value}.
   */
  public static Value value(Object v) {
    if (v == null || v instanceof NullValue) {
      return Value.newBuilder().setNullValue(NullValue.NULL_VALUE).build();
    } else if (v instanceof Value value) {
      return value;
    } else if (v instanceof Boolean b) {
      return Value.newBuilder().setBoolValue(b).build();
    } else if (v instanceof String s) {
      return Value.newBuilder().setStringValue(s).build();
    } else if (v instanceof Number n) {
      return Value.newBuilder().setNumberValue(n.doubleValue()).build();
    } else if (v instanceof Struct s) {
      return Value.newBuilder().setStructValue(s).build();
    } else if (v instanceof ListValue l) {
      return Value.newBuilder().setListValue(l).build();
    } else if (v instanceof Map<?, ?> m) {
      Struct.Builder b = Struct.newBuilder();
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (!(e.getKey() instanceof String k)) {
          throw new IllegalArgumentException("args: object keys must be strings");
        }
        b.putFields(k, value(e.getValue()));
      }
      return Value.newBuilder().setStructValue(b).build();
    } else if (v instanceof Iterable<?> it) {
      ListValue.Builder b = ListValue.newBuilder();
      for (Object item : it) {
        b.addValues(value(item));
      }
      return Value.newBuilder().setListValue(b).build();
    }
    throw new IllegalArgumentException("args: unsupported type " + v.getClass().getName());
  }
}
