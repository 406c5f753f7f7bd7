package dev.opledger.client;

import com.google.protobuf.ListValue;
import com.google.protobuf.NullValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Jcs is RFC 8785 (JSON Canonicalization Scheme) serialization, the canonical form behind opledger's
 * fingerprints and idempotency keys (docs/fingerprint.md).
 *
 * <p>It accepts protobuf's JSON types ({@link Struct}, {@link Value}, {@link ListValue}) and plain
 * Java values: {@code null}, {@link Boolean}, {@link String}, {@link Number} (converted to a double
 * first, exactly as a {@code google.protobuf.Struct} carries it), {@link Map} with string keys and
 * {@link Iterable}. NaN, infinities and strings with unpaired surrogates are refused with {@link
 * IllegalArgumentException}: they have no canonical form.
 */
public final class Jcs {
  /** Nesting limit, as in the Go reference; turns a cycle into an error. */
  private static final int MAX_DEPTH = 10000;

  private Jcs() {}

  /** Canonicalize returns the canonical JSON text of value. */
  public static String canonicalize(Object value) {
    StringBuilder sb = new StringBuilder(128);
    append(sb, value, 0);
    return sb.toString();
  }

  /** CanonicalizeUtf8 returns the canonical JSON of value as UTF-8 bytes, what gets hashed. */
  public static byte[] canonicalizeUtf8(Object value) {
    return canonicalize(value).getBytes(StandardCharsets.UTF_8);
  }

  private static void append(StringBuilder sb, Object v, int depth) {
    if (depth > MAX_DEPTH) {
      throw new IllegalArgumentException("JCS: nesting deeper than " + MAX_DEPTH);
    }
    if (v == null || v instanceof NullValue) {
      sb.append("null");
    } else if (v instanceof Boolean b) {
      sb.append(b ? "true" : "false");
    } else if (v instanceof String s) {
      appendString(sb, s);
    } else if (v instanceof Number n) {
      sb.append(formatNumber(n.doubleValue()));
    } else if (v instanceof Value value) {
      appendValue(sb, value, depth);
    } else if (v instanceof Struct s) {
      appendObject(sb, s.getFieldsMap(), depth);
    } else if (v instanceof ListValue l) {
      appendArray(sb, l.getValuesList(), depth);
    } else if (v instanceof Map<?, ?> m) {
      appendObject(sb, m, depth);
    } else if (v instanceof Iterable<?> it) {
      appendArray(sb, it, depth);
    } else {
      throw new IllegalArgumentException("JCS: unsupported type " + v.getClass().getName());
    }
  }

  private static void appendValue(StringBuilder sb, Value v, int depth) {
    switch (v.getKindCase()) {
      case NULL_VALUE -> sb.append("null");
      case BOOL_VALUE -> sb.append(v.getBoolValue() ? "true" : "false");
      case NUMBER_VALUE -> sb.append(formatNumber(v.getNumberValue()));
      case STRING_VALUE -> appendString(sb, v.getStringValue());
      case STRUCT_VALUE -> appendObject(sb, v.getStructValue().getFieldsMap(), depth);
      case LIST_VALUE -> appendArray(sb, v.getListValue().getValuesList(), depth);
      default -> throw new IllegalArgumentException("JCS: google.protobuf.Value with no kind set");
    }
  }

  private static void appendArray(StringBuilder sb, Iterable<?> items, int depth) {
    sb.append('[');
    boolean first = true;
    for (Object item : items) {
      if (!first) {
        sb.append(',');
      }
      first = false;
      append(sb, item, depth + 1);
    }
    sb.append(']');
  }

  private static void appendObject(StringBuilder sb, Map<?, ?> m, int depth) {
    // RFC 8785 sorts member names by UTF-16 code units: exactly String.compareTo.
    TreeMap<String, Object> sorted = new TreeMap<>();
    for (Map.Entry<?, ?> e : m.entrySet()) {
      if (!(e.getKey() instanceof String k)) {
        throw new IllegalArgumentException("JCS: object keys must be strings");
      }
      sorted.put(k, e.getValue());
    }
    sb.append('{');
    boolean first = true;
    for (Map.Entry<String, Object> e : sorted.entrySet()) {
      if (!first) {
        sb.append(',');
      }
      first = false;
      appendString(sb, e.getKey());
      sb.append(':');
      append(sb, e.getValue(), depth + 1);
    }
    sb.append('}');
  }

  private static final char[] HEX = "0123456789abcdef".toCharArray();

  /** Escapes like ECMAScript JSON.stringify: only '"', '\\' and C0 controls. */
  static void appendString(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) {
          throw new IllegalArgumentException("JCS: string has an unpaired surrogate");
        }
        sb.append(c).append(s.charAt(++i));
        continue;
      }
      if (Character.isLowSurrogate(c)) {
        throw new IllegalArgumentException("JCS: string has an unpaired surrogate");
      }
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\b' -> sb.append("\\b");
        case '\t' -> sb.append("\\t");
        case '\n' -> sb.append("\\n");
        case '\f' -> sb.append("\\f");
        case '\r' -> sb.append("\\r");
        default -> {
          if (c < 0x20) {
            sb.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 0xf]);
          } else {
            sb.append(c);
          }
        }
      }
    }
    sb.append('"');
  }

  /**
   * FormatNumber writes d as ECMAScript Number.prototype.toString does (RFC 8785 §3.2.2.3): the
   * shortest decimal that reads back as d (the closest one if several), laid out without exponent
   * from 1e-6 up to 1e21. Java 17's Double.toString is not always shortest, so the digits are
   * searched with exact BigDecimal arithmetic instead.
   */
  public static String formatNumber(double d) {
    if (Double.isNaN(d) || Double.isInfinite(d)) {
      throw new IllegalArgumentException("JCS: " + d + " has no JSON form");
    }
    if (d == 0) {
      return "0"; // also -0
    }
    if (d < 0) {
      return "-" + formatNumber(-d);
    }
    BigDecimal shortest = shortestDigits(d);
    String digits = shortest.unscaledValue().toString();
    int k = digits.length();
    int n = k - shortest.scale(); // d = digits × 10^(n-k)
    StringBuilder sb = new StringBuilder(32);
    if (k <= n && n <= 21) {
      sb.append(digits);
      sb.append("0".repeat(n - k));
    } else if (0 < n && n <= 21) {
      sb.append(digits, 0, n).append('.').append(digits, n, k);
    } else if (-6 < n && n <= 0) {
      sb.append("0.").append("0".repeat(-n)).append(digits);
    } else {
      sb.append(digits.charAt(0));
      if (k > 1) {
        sb.append('.').append(digits, 1, k);
      }
      int e = n - 1;
      sb.append('e').append(e < 0 ? '-' : '+').append(Math.abs(e));
    }
    return sb.toString();
  }

  /**
   * The decimal with the fewest significant digits that rounds to d; among those with that many
   * digits, the closest to d (ties to an even last digit). d is finite and positive.
   */
  private static BigDecimal shortestDigits(double d) {
    BigDecimal exact = new BigDecimal(d);
    for (int p = 1; p <= 17; p++) {
      List<BigDecimal> ok = new ArrayList<>(2);
      for (RoundingMode mode : new RoundingMode[] {RoundingMode.FLOOR, RoundingMode.CEILING}) {
        BigDecimal c = exact.round(new MathContext(p, mode));
        if (c.doubleValue() == d) {
          ok.add(c);
        }
      }
      if (ok.isEmpty()) {
        continue;
      }
      BigDecimal pick = ok.get(0);
      if (ok.size() == 2 && ok.get(0).compareTo(ok.get(1)) != 0) {
        int cmp = exact.subtract(ok.get(0)).abs().compareTo(ok.get(1).subtract(exact).abs());
        if (cmp > 0 || (cmp == 0 && !ok.get(1).unscaledValue().testBit(0))) {
          pick = ok.get(1);
        }
      }
      return pick.stripTrailingZeros();
    }
    throw new AssertionError("17 significant digits always round-trip a double");
  }
}
