package tool

import (
	"bytes"
	"fmt"
	"regexp"
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces ${VAR} and ${VAR:-default} in the raw file text and
// turns $$ into a literal $. A $ followed by anything else stays as it is,
// because JSON Schema patterns such as ^[A-Z]{3}$ are full of them. The
// default is literal text (no nested expansion) and is used when VAR is
// unset or empty.
func expandEnv(data []byte, getenv func(string) string) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(data))
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c != '$' || i+1 >= len(data) {
			out.WriteByte(c)
			continue
		}
		switch data[i+1] {
		case '$':
			out.WriteByte('$')
			i++
		case '{':
			end := bytes.IndexByte(data[i+2:], '}')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated ${ (write $$ for a literal $)", lineOf(data, i))
			}
			expr := string(data[i+2 : i+2+end])
			name, def, hasDefault := cutDefault(expr)
			if !envName.MatchString(name) {
				return nil, fmt.Errorf("line %d: bad variable reference ${%s}: want ${NAME} or ${NAME:-default} (write $$ for a literal $)", lineOf(data, i), expr)
			}
			v := getenv(name)
			if v == "" && hasDefault {
				v = def
			}
			out.WriteString(v)
			i += 2 + end
		default:
			out.WriteByte(c)
		}
	}
	return out.Bytes(), nil
}

func cutDefault(expr string) (name, def string, ok bool) {
	for i := 0; i+1 < len(expr); i++ {
		if expr[i] == ':' && expr[i+1] == '-' {
			return expr[:i], expr[i+2:], true
		}
	}
	return expr, "", false
}

func lineOf(data []byte, off int) int {
	return bytes.Count(data[:off], []byte{'\n'}) + 1
}
