// A number a double cannot carry as written is refused before anything is sent. Tool-call
// arguments travel to the ledger as a google.protobuf.Struct, whose numbers are IEEE-754 doubles,
// and JSON.parse makes every number a double: 9007199254740993 would arrive as 9007199254740992
// and 12.00000000000000000001 as 12, silently. A model's JSON text is checked first: a number
// whose double, in its shortest form (String(n), what the ledger's canonical JSON sends on), is not
// the number written is refused, as every opledger client does
// (clients/testdata/inexact_numbers.json).

const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** inexactNumber returns the first number of the JSON text whose double is not the number
 * written, with the form it would arrive in, or undefined. */
export function inexactNumber(text: string): { literal: string; carried: string } | undefined {
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === "\\") {
          i++;
        }
      }
      continue;
    }
    if (c !== "-" && (c < "0" || c > "9")) {
      continue;
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m === null) {
      continue;
    }
    const literal = m[0];
    i += literal.length - 1;
    const n = Number(literal);
    if (!Number.isFinite(n)) {
      continue; // beyond the double's range: left to the ledger
    }
    const carried = String(n);
    if (carried !== literal && !sameDecimal(literal, carried)) {
      return { literal, carried };
    }
  }
  return undefined;
}

/** sameDecimal compares two decimal numbers written in JSON's syntax exactly. */
function sameDecimal(a: string, b: string): boolean {
  const x = normal(a);
  const y = normal(b);
  return x !== undefined && y !== undefined && x === y;
}

/** normal writes a decimal number as sign, significant digits and exponent, or undefined for a
 * literal too long to compare (a double has at most 17 significant digits). */
function normal(s: string): string | undefined {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(s);
  if (m === null || s.length > 1024) {
    return undefined;
  }
  const frac = m[3] ?? "";
  let digits = (m[2] + frac).replace(/^0+/, "");
  let exp = parseInt(m[4] ?? "0", 10) - frac.length;
  if (digits === "") {
    return "0";
  }
  const trimmed = digits.replace(/0+$/, "");
  exp += digits.length - trimmed.length;
  digits = trimmed;
  return `${m[1]}${digits}e${exp}`;
}

/** checkNumbers throws a TypeError naming the first number of the JSON text a double cannot
 * carry as written. */
export function checkNumbers(text: string): void {
  const bad = inexactNumber(text);
  if (bad !== undefined) {
    throw new TypeError(
      `the number ${bad.literal} cannot travel exactly (the ledger's numbers are IEEE-754 doubles, ` +
        `and it would arrive as ${bad.carried}): send it as a string`,
    );
  }
}

/** duplicateMember returns the first member name given twice in one object of the JSON text
 * (text JSON.parse accepted), or undefined: JSON.parse keeps the last silently. */
export function duplicateMember(text: string): string | undefined {
  const stack: (Set<string> | undefined)[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "{") {
      stack.push(new Set());
    } else if (c === "[") {
      stack.push(undefined);
    } else if (c === "}" || c === "]") {
      stack.pop();
    } else if (c === '"') {
      const start = i;
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === "\\") {
          i++;
        }
      }
      const names = stack[stack.length - 1];
      let j = i + 1;
      while (j < text.length && " \t\n\r".includes(text[j])) {
        j++;
      }
      if (names === undefined || text[j] !== ":") {
        continue; // a value, not a member name
      }
      const name = JSON.parse(text.slice(start, i + 1)) as string;
      if (names.has(name)) {
        return name;
      }
      names.add(name);
    }
  }
  return undefined;
}

/** hasLoneSurrogate reports whether a parsed JSON value holds a string (or member name) with an
 * unpaired UTF-16 surrogate, which protobuf's UTF-8 strings would carry as U+FFFD. */
export function hasLoneSurrogate(v: unknown): boolean {
  if (typeof v === "string") {
    return /[\uD800-\uDFFF]/u.test(v);
  }
  if (Array.isArray(v)) {
    return v.some(hasLoneSurrogate);
  }
  if (v !== null && typeof v === "object") {
    return Object.entries(v).some(([k, x]) => hasLoneSurrogate(k) || hasLoneSurrogate(x));
  }
  return false;
}
