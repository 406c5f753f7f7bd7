// Package cache is a small bounded in-memory map for values that never
// change once written (finished operations and their encodings), so that
// replays and reads of them cost no database round trip or re-encoding.
//
// When it is full, storing a new entry evicts the oldest of a few sampled
// at random. That keeps every hit a read under a shared lock, with no
// recency bookkeeping, and holds a working set that fits entirely.
package cache

import (
	"sync"
	"time"
)

// Map is a bounded map from K to V whose entries also expire at a deadline
// chosen when they are stored. The zero value is not usable; use New.
type Map[K comparable, V any] struct {
	mu       sync.RWMutex
	m        map[K]entry[V]
	capacity int
	now      func() time.Time
}

type entry[V any] struct {
	v        V
	deadline time.Time
}

// New returns a Map holding at most capacity entries; capacity ≤ 0 returns
// a Map that stores nothing.
func New[K comparable, V any](capacity int) *Map[K, V] {
	return &Map[K, V]{m: make(map[K]entry[V]), capacity: capacity, now: time.Now}
}

// Get returns the value stored under k unless it expired or was evicted.
func (m *Map[K, V]) Get(k K) (V, bool) {
	var zero V
	if m == nil || m.capacity <= 0 {
		return zero, false
	}
	m.mu.RLock()
	e, ok := m.m[k]
	m.mu.RUnlock()
	if !ok {
		return zero, false
	}
	if !m.now().Before(e.deadline) {
		m.mu.Lock()
		if cur, ok := m.m[k]; ok && cur.deadline.Equal(e.deadline) {
			delete(m.m, k)
		}
		m.mu.Unlock()
		return zero, false
	}
	return e.v, true
}

// Put stores v under k until deadline; a deadline already past stores
// nothing.
func (m *Map[K, V]) Put(k K, v V, deadline time.Time) {
	if m == nil || m.capacity <= 0 || !m.now().Before(deadline) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[k]; !ok && len(m.m) >= m.capacity {
		m.evictLocked()
	}
	m.m[k] = entry[V]{v: v, deadline: deadline}
}

// evictSample is how many entries an eviction looks at.
const evictSample = 5

// evictLocked deletes, of a few entries at random (Go's map iteration
// starts at a random place), the one whose deadline comes first: as
// deadlines are set when entries are stored, that is about the oldest, so
// a burst of new entries does not push out what was stored just before it
// as often as purely random eviction would (Redis approximates LRU the
// same way).
func (m *Map[K, V]) evictLocked() {
	var victim K
	var first time.Time
	n := 0
	for k, e := range m.m {
		if n == 0 || e.deadline.Before(first) {
			victim, first = k, e.deadline
		}
		if n++; n == evictSample {
			break
		}
	}
	if n > 0 {
		delete(m.m, victim)
	}
}

// Delete forgets k.
func (m *Map[K, V]) Delete(k K) {
	if m == nil || m.capacity <= 0 {
		return
	}
	m.mu.Lock()
	delete(m.m, k)
	m.mu.Unlock()
}

// Len is the number of entries held, expired ones included until they are
// looked up or evicted.
func (m *Map[K, V]) Len() int {
	if m == nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.m)
}
