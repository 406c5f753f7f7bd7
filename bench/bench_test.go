package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTinyRun runs every scenario and every baseline for a second at two
// clients against an in-process server, and checks only that each completed
// ops without errors: times are the machine's business.
func TestTinyRun(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Concurrency:        []int{2},
		Duration:           time.Second,
		Seed:               200,
		CPUProfileDir:      t.TempDir(),
		ProfileConcurrency: 2,
		Progress:           &progress,
	})
	require.NoError(t, err, progress.String())
	require.Empty(t, rep.Failures(), progress.String())
	for _, sc := range Scenarios {
		for _, sys := range append([]string{SystemOpledger}, baselines[sc]...) {
			found := false
			for _, r := range rep.Results {
				if r.Scenario == sc && r.System == sys {
					found = true
					require.Positive(t, r.Ops, "%s %s", sc, sys)
					require.Zero(t, r.Errors, "%s %s: %s", sc, sys, r.FirstError)
				}
			}
			require.True(t, found, "no result for %s %s", sc, sys)
		}
	}
	require.Len(t, rep.InProcess, len(Scenarios))
	require.Len(t, rep.Profiles, len(Scenarios))
	var table, md bytes.Buffer
	rep.WriteTable(&table)
	rep.WriteMarkdown(&md)
	for _, sc := range Scenarios {
		require.Contains(t, table.String(), sc)
		require.Contains(t, md.String(), "| "+sc+" |")
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var lat []time.Duration
	for i := 1000; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p50, p99, p999 := percentiles(lat)
	require.Equal(t, 500*time.Millisecond, p50)
	require.Equal(t, 990*time.Millisecond, p99)
	require.Equal(t, 999*time.Millisecond, p999)
	p50, _, _ = percentiles(nil)
	require.Zero(t, p50)
}

func TestPgbenchScriptsUseNoColonInLiterals(t *testing.T) {
	t.Parallel()
	// pgbench takes :name inside a string literal for a variable too; a
	// literal like 'server:x' breaks prepared mode.
	for _, name := range []string{"prepare", "execute", "read", "duplicate"} {
		s := pgbenchScripts(name)
		inLit := false
		for i, r := range s {
			if r == '\'' {
				inLit = !inLit
			}
			if inLit && r == ':' && i+1 < len(s) && (s[i+1] >= 'a' && s[i+1] <= 'z' || s[i+1] >= 'A' && s[i+1] <= 'Z') {
				t.Fatalf("script %s: %q inside a string literal", name, s[i:min(len(s), i+12)])
			}
		}
	}
}
