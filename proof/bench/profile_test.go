package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var profileSink [][]byte

//go:noinline
func allocateBefore() {
	for range 512 {
		profileSink = append(profileSink, make([]byte, 64<<10))
	}
}

//go:noinline
func allocateForTheProfile() {
	for range 512 {
		profileSink = append(profileSink, make([]byte, 64<<10))
	}
}

// TestAllocsProfileIsCurrent: the allocation profiles written around a
// profiled scenario must hold what was allocated up to the moment they are
// written. The runtime publishes allocations to the profile only when a
// garbage collection completes, so without one the "after" profile misses
// the scenario's last allocations and the next scenario's diff counts them.
func TestAllocsProfileIsCurrent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection but the profile's own
	path := filepath.Join(t.TempDir(), "allocs.txt")
	allocateBefore() // the scenario before, and its collection
	runtime.GC()
	allocateForTheProfile()
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, allocsProfile(f, 1))
	require.NoError(t, f.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Positive(t, allocatedBy(string(b), "allocateBefore"))
	require.Positive(t, allocatedBy(string(b), "allocateForTheProfile"), "the profile misses allocations made just before it was written")
	profileSink = nil
}

// allocatedBy sums the allocated bytes of the records of a debug=1
// allocation profile whose stack names fn. A record starts with
// "inuse_objects: inuse_bytes [alloc_objects: alloc_bytes] @ pcs" and its
// stack follows as "#" lines; every stack ever sampled is listed, with zero
// counts when none of its allocations is published yet.
func allocatedBy(profile, fn string) int64 {
	var total, alloc int64
	for _, line := range strings.Split(profile, "\n") {
		if _, rest, ok := strings.Cut(line, "["); ok && strings.Contains(line, "] @") {
			_, bytes, _ := strings.Cut(rest, ": ")
			bytes, _, _ = strings.Cut(bytes, "]")
			alloc, _ = strconv.ParseInt(strings.TrimSpace(bytes), 10, 64)
			continue
		}
		if strings.HasPrefix(line, "#\t") && strings.Contains(line, "."+fn+"+") {
			total += alloc
			alloc = 0
		}
	}
	return total
}
