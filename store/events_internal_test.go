package store

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// withoutEvent are the columns a statement may change without bumping
// events; OperationTransition returns each of them rather than taking it
// from Transition.Base.
var withoutEvent = []string{"waited", "reconcile_attempts", "next_reconcile_at"}

var updateSet = regexp.MustCompile(`(?s)UPDATE operation(?: o)? SET(.*?)(?:\n\s*WHERE |\nFROM |\sWHERE )`)

// setColumns lists the columns a SET clause assigns: its top-level
// comma-separated parts, each "column = expression".
func setColumns(clause string) []string {
	var cols []string
	depth, start := 0, 0
	part := func(p string) {
		if name, _, ok := strings.Cut(strings.TrimSpace(p), " = "); ok {
			cols = append(cols, name)
		}
	}
	for i, r := range clause {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				part(clause[start:i])
				start = i + 1
			}
		}
	}
	part(clause[start:])
	return cols
}

// TestEveryChangeBumpsEvents: OperationTransition completes the row it
// wrote from the caller's copy when that copy's events is one behind, which
// is right only if every statement that changes an operation bumps events,
// except those that change only the columns the transition returns. A new
// statement that breaks the rule fails here.
func TestEveryChangeBumpsEvents(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("queries/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range updateSet.FindAllStringSubmatch(string(b), -1) {
			n++
			cols := setColumns(m[1])
			require.NotEmpty(t, cols, "%s: %s", f, m[0])
			if slices.Contains(cols, "events") {
				continue
			}
			for _, c := range cols {
				require.Contains(t, withoutEvent, c,
					"%s: an UPDATE of operation sets %s without bumping events:\n%s", f, c, m[0])
			}
		}
	}
	require.GreaterOrEqual(t, n, 6, "the statements that update operation were not all found")
}
