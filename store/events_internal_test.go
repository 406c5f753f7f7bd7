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
	claimKnownSQL   = regexp.MustCompile(`(?s)-- name: OperationClaimKnown :many\n.*?\nSELECT (.*?) FROM upd;`)
	claimUpdate     = regexp.MustCompile(`(?s)WITH upd AS \((.*?)RETURNING .*?\), ev AS \((.*?FROM upd)\n\)`)
)

// selected lists the columns a final SELECT returns, without aliases and
// computed columns.
func selected(list string) []string {
	var out []string
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		if !strings.Contains(c, " ") {
			out = append(out, c)
		}
	}
	return out
}

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

// TestEveryChangeBumpsEvents: OperationTransition and OperationClaim with a
// copy complete the row they wrote from the caller's copy when that copy's
// events is one behind (TransitionParams.Base, Claim.Base), which is right only
// if every statement that changes an operation bumps events, except those
// that change only columns both statements return. A statement or migration that breaks the rule fails
// here, and so does an UPDATE of operation this test cannot read.
func TestEveryChangeBumpsEvents(t *testing.T) {
	t.Parallel()
	q, err := os.ReadFile("queries/operation.sql")
	require.NoError(t, err)
	m := transitionSQL.FindStringSubmatch(string(q))
	require.NotNil(t, m, "OperationTransition's final SELECT not found")
	k := claimKnownSQL.FindStringSubmatch(string(q))
	require.NotNil(t, k, "OperationClaimKnown's final SELECT not found")
	// A column may change without an event only if both statements that
	// complete a row from the caller's copy return it.
	var returned []string
	for _, c := range selected(m[1]) {
		if slices.Contains(selected(k[1]), c) {
			returned = append(returned, c)
		}
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
					"%s: an UPDATE of operation sets %s without bumping events, and the transition or the claim with a copy does not return it:\n%s", f, c, m[0])
			}
		}
	}
	require.GreaterOrEqual(t, n, 7, "the statements that update operation were not all found")
}

// TestClaimStatementsShareTheGuard: OperationClaimKnown is OperationClaim
// returning fewer columns; their UPDATE, guard and event must stay the same
// text, so a rule changed in one cannot be missed in the other.
func TestClaimStatementsShareTheGuard(t *testing.T) {
	t.Parallel()
	wide, err := QueryText("OperationClaim")
	require.NoError(t, err)
	known, err := QueryText("OperationClaimKnown")
	require.NoError(t, err)
	w, k := claimUpdate.FindStringSubmatch(wide), claimUpdate.FindStringSubmatch(known)
	require.NotNil(t, w, "OperationClaim's UPDATE not found:\n%s", wide)
	require.NotNil(t, k, "OperationClaimKnown's UPDATE not found:\n%s", known)
	require.Contains(t, w[1], "WHERE o.id = sqlc.arg(id)")
	require.Equal(t, w[1], k[1], "the claim's UPDATE and guard")
	require.Contains(t, w[2], "SELECT upd.id, upd.events")
	require.Equal(t, w[2], k[2], "the claim's event")
}
