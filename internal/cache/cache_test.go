package cache

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGetPutExpiry(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	m := New[string, int](4)
	m.now = func() time.Time { return now }

	m.Put("a", 1, now.Add(time.Minute))
	v, ok := m.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)

	m.Put("late", 2, now) // a deadline that is not in the future stores nothing
	_, ok = m.Get("late")
	require.False(t, ok)

	now = now.Add(time.Minute)
	_, ok = m.Get("a")
	require.False(t, ok, "an entry is gone at its deadline")
	require.Equal(t, 0, m.Len())
}

func TestBoundedAndAWorkingSetThatFitsStays(t *testing.T) {
	t.Parallel()
	m := New[int, int](100)
	far := time.Now().Add(time.Hour)
	for i := range 100 {
		m.Put(i, i, far)
	}
	// A working set that fits is never evicted, however often it is read
	// and rewritten.
	for round := range 50 {
		for i := range 100 {
			v, ok := m.Get(i)
			require.True(t, ok, "round %d key %d", round, i)
			require.Equal(t, i, v)
			m.Put(i, i, far)
		}
	}
	// Past the capacity, the map stays bounded and keeps the newest entry.
	for i := 100; i < 1000; i++ {
		m.Put(i, i, far)
		require.LessOrEqual(t, m.Len(), 100)
		v, ok := m.Get(i)
		require.True(t, ok)
		require.Equal(t, i, v)
	}
}

func TestDisabledAndDelete(t *testing.T) {
	t.Parallel()
	off := New[string, int](0)
	off.Put("a", 1, time.Now().Add(time.Hour))
	_, ok := off.Get("a")
	require.False(t, ok)

	m := New[string, int](8)
	m.Put("a", 1, time.Now().Add(time.Hour))
	m.Delete("a")
	_, ok = m.Get("a")
	require.False(t, ok)
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	m := New[int, int](64)
	far := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := (g*7 + i) % 200
				m.Put(k, k*2, far)
				if v, ok := m.Get(k); ok {
					require.Equal(t, k*2, v)
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, m.Len(), 64)
}

// TestEvictionPrefersOldEntries: when a burst of new entries overflows the
// map, most of the entries stored just before the burst survive while the
// oldest ones go, as sampled eviction by deadline intends.
func TestEvictionPrefersOldEntries(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	m := New[int, int](1000)
	m.now = func() time.Time { return now }
	for i := range 1000 { // 0..999, oldest first
		now = now.Add(time.Millisecond)
		m.Put(i, i, now.Add(time.Hour))
	}
	for i := 1000; i < 1500; i++ { // 500 more evict 500
		now = now.Add(time.Millisecond)
		m.Put(i, i, now.Add(time.Hour))
	}
	require.Equal(t, 1000, m.Len())
	old, recent := 0, 0
	for i := range 500 {
		if _, ok := m.Get(i); ok {
			old++
		}
		if _, ok := m.Get(500 + i); ok {
			recent++
		}
	}
	require.Greater(t, recent, old+100, "older entries are evicted first: %d of the oldest and %d of the more recent half survive", old, recent)
}
