package tool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func fakeEnv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestExpandEnv(t *testing.T) {
	t.Parallel()
	env := fakeEnv(map[string]string{"HOST": "pay.internal", "EMPTY": "", "PORT": "8080"})
	tests := []struct {
		name, in, want, wantErr string
	}{
		{name: "set", in: "http://${HOST}:${PORT}/x", want: "http://pay.internal:8080/x"},
		{name: "unset is empty", in: "a${NOPE}b", want: "ab"},
		{name: "default when unset", in: "${NOPE:-http://127.0.0.1:7070}/charges", want: "http://127.0.0.1:7070/charges"},
		{name: "default when empty", in: "${EMPTY:-dflt}", want: "dflt"},
		{name: "default ignored when set", in: "${HOST:-dflt}", want: "pay.internal"},
		{name: "empty default", in: "[${NOPE:-}]", want: "[]"},
		{name: "dollar dollar", in: "cost: $$5 and $${HOST}", want: "cost: $5 and ${HOST}"},
		{name: "lone dollar kept", in: `pattern: "^[A-Z]{3}$"`, want: `pattern: "^[A-Z]{3}$"`},
		{name: "dollar at end", in: "x$", want: "x$"},
		{name: "dollar before letter kept", in: "$HOST", want: "$HOST"},
		{name: "default keeps colons and braces-free text", in: "${NOPE:-a:b-c}", want: "a:b-c"},
		{name: "unterminated", in: "line1\n${HOST", wantErr: "line 2: unterminated"},
		{name: "bad name", in: "${1X}", wantErr: "bad variable reference"},
		{name: "empty name", in: "${}", wantErr: "bad variable reference"},
		{name: "name with dash", in: "${A-B}", wantErr: "bad variable reference"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := expandEnv([]byte(tt.in), env)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}
