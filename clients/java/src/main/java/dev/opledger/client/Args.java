package dev.opledger.client;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.ListValue;
import com.google.protobuf.NullValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayDeque;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Args builds the {@code google.protobuf.Struct} a Prepare carries. Numbers become IEEE-754
 * doubles: send integers above 2^53 as strings (one a double cannot carry as written is refused).
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

  /**
   * FromJson parses a JSON object, e.g. a model's tool-call arguments, into a Struct. A number a
   * double cannot carry as written (an integer above 2^53, more digits than a double holds) is
   * refused with an IllegalArgumentException naming it ({@link #inexactNumber}) rather than changed
   * on the way.
   */
  public static Struct fromJson(String json) {
    Struct.Builder b = Struct.newBuilder();
    try {
      JsonFormat.parser().merge(json, b);
    } catch (InvalidProtocolBufferException e) {
      throw new IllegalArgumentException("args must be a JSON object: " + e.getMessage(), e);
    }
    String[] bad = inexactNumber(json);
    if (bad != null) {
      throw inexact(bad[0], bad[1]);
    }
    String twice = duplicateMember(json);
    if (twice != null) {
      throw new IllegalArgumentException(
          "args: the member \"" + twice + "\" appears twice in one object: which one counts is not defined");
    }
    Struct s = b.build();
    try {
      Jcs.canonicalize(s); // refuses an unpaired surrogate, which protobuf would send as '?'
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("args: " + e.getMessage(), e);
    }
    return s;
  }

  /**
   * DuplicateMember returns the first member name given twice in one object of the JSON text (text
   * JsonFormat accepted), or null: JsonFormat keeps the last silently.
   */
  static String duplicateMember(String json) {
    ArrayDeque<Set<String>> stack = new ArrayDeque<>();
    Set<String> array = Set.of(); // marks an array level
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      if (c == '{') {
        stack.push(new HashSet<>());
      } else if (c == '[') {
        stack.push(array);
      } else if (c == '}' || c == ']') {
        stack.pop();
      } else if (c == '"') {
        int start = i;
        for (i++; i < json.length() && json.charAt(i) != '"'; i++) {
          if (json.charAt(i) == '\\') {
            i++;
          }
        }
        int j = i + 1;
        while (j < json.length() && " \t\n\r".indexOf(json.charAt(j)) >= 0) {
          j++;
        }
        Set<String> names = stack.peek();
        if (names == null || names == array || j >= json.length() || json.charAt(j) != ':') {
          continue; // a value, not a member name
        }
        Struct.Builder one = Struct.newBuilder();
        try {
          JsonFormat.parser().merge("{" + json.substring(start, i + 1) + ":null}", one);
        } catch (InvalidProtocolBufferException e) {
          return null;
        }
        String name = one.getFieldsMap().keySet().iterator().next();
        if (!names.add(name)) {
          return name;
        }
      }
    }
    return null;
  }

  private static final Pattern NUMBER = Pattern.compile("-?\\d+(?:\\.\\d+)?(?:[eE][+-]?\\d+)?");

  /** MAX_LITERAL bounds the literal compared exactly (a double has at most 17 significant digits). */
  private static final int MAX_LITERAL = 1024;

  /**
   * InexactNumber returns the first number of the JSON text whose IEEE-754 double, in its shortest
   * form (what the ledger's canonical JSON sends on), is not the number written, and that form:
   * {literal, carried}; null when there is none. Args travel to the ledger as a
   * google.protobuf.Struct, whose numbers are doubles, so 9007199254740993 would arrive as
   * 9007199254740992, silently; every opledger client refuses such a number
   * (clients/testdata/inexact_numbers.json).
   */
  public static String[] inexactNumber(String json) {
    Matcher m = NUMBER.matcher(json);
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      if (c == '"') {
        for (i++; i < json.length() && json.charAt(i) != '"'; i++) {
          if (json.charAt(i) == '\\') {
            i++;
          }
        }
        continue;
      }
      if (c != '-' && (c < '0' || c > '9')) {
        continue;
      }
      m.region(i, json.length());
      if (!m.lookingAt()) {
        continue;
      }
      String literal = m.group();
      i += literal.length() - 1;
      String carried = inexact(literal);
      if (carried != null) {
        return new String[] {literal, carried};
      }
    }
    return null;
  }

  /** Inexact returns the form literal's double would arrive in, when that is another number. */
  private static String inexact(String literal) {
    double d = Double.parseDouble(literal);
    if (Double.isInfinite(d)) {
      return null; // beyond the double's range: left to the parser and the ledger
    }
    String carried = Jcs.formatNumber(d);
    if (carried.equals(literal)) {
      return null;
    }
    if (literal.length() <= MAX_LITERAL
        && new BigDecimal(literal).compareTo(new BigDecimal(carried)) == 0) {
      return null;
    }
    return carried;
  }

  private static IllegalArgumentException inexact(String literal, String carried) {
    return new IllegalArgumentException(
        "args: the number "
            + literal
            + " cannot travel exactly (the ledger's numbers are IEEE-754 doubles, and it would arrive as "
            + carried
            + "): send it as a string");
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
      if (v instanceof Long || v instanceof BigInteger || v instanceof BigDecimal) {
        String carried = inexact(n.toString());
        if (carried != null) {
          throw inexact(n.toString(), carried);
        }
      }
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
