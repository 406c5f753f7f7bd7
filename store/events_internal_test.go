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

var (
	updateOperation = regexp.MustCompile(`(?i)\bupdate\s+operation\b`)
	updateSet       = regexp.MustCompile(`(?is)\bupdate\s+operation(?:\s+(?:as\s+)?\w+)?\s+set\s(.*?)(?:\swhere\s|\sfrom\s|;)`)
	transitionSQL   = regexp.MustCompile(`(?s)-- name: OperationTransition :one\n.*?\nSELECT (.*?) FROM upd;`)
)

// setColumns lists the columns a SET clause assigns: its top-level
// comma-separated parts, each "column = expression".
func setColumns(clause string) []string {
	var cols []string
	depth, start := 0, 0
	part := func(p string) {
		if name, _, ok := strings.Cut(strings.TrimSpace(p), "="); ok {
			cols = append(cols, strings.ToLower(strings.TrimSpace(name)))
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
// wrote from the caller's copy when that copy's events is one behind
// (Transition.Base), which is right only if every statement that changes
// an operation bumps events, except those that change only columns the
// transition returns. A statement or migration that breaks the rule fails
// here, and so does an UPDATE of operation this test cannot read.
func TestEveryChangeBumpsEvents(t *testing.T) {
	t.Parallel()
	q, err := os.ReadFile("queries/operation.sql")
	require.NoError(t, err)
	m := transitionSQL.FindStringSubmatch(string(q))
	require.NotNil(t, m, "OperationTransition's final SELECT not found")
	var returned []string
	for _, c := range strings.Split(m[1], ",") {
		returned = append(returned, strings.TrimSpace(c))
	}
	require.Contains(t, returned, "events")

	queries, err := filepath.Glob("queries/*.sql")
	require.NoError(t, err)
	migrations, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	n := 0
	for _, f := range append(queries, migrations...) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := string(b)
		found := updateSet.FindAllStringSubmatch(text, -1)
		require.Len(t, found, len(updateOperation.FindAllString(text, -1)), "%s: an UPDATE of operation this test cannot read", f)
		for _, m := range found {
			n++
			cols := setColumns(m[1])
			require.NotEmpty(t, cols, "%s: %s", f, m[0])
			if slices.Contains(cols, "events") {
				continue
			}
			for _, c := range cols {
				require.Contains(t, returned, c,
					"%s: an UPDATE of operation sets %s without bumping events, and the transition does not return it:\n%s", f, c, m[0])
			}
		}
	}
	require.GreaterOrEqual(t, n, 7, "the statements that update operation were not all found")
}
