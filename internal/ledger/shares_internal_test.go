package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// fakeShares is a BudgetReserveEach that records each statement's shares
// and holds it until the test releases it.
type fakeShares struct {
	mu      sync.Mutex
	batches [][]string
	entered chan *fakeStatement
}

// fakeStatement is one statement fakeShares holds: its shares' operations,
// and where the test sends its error (nil: it answers).
type fakeStatement struct {
	ids     []string
	release chan error
}

func (f *fakeShares) send(_ context.Context, _ *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.OperationID
	}
	f.mu.Lock()
	f.batches = append(f.batches, ids)
	f.mu.Unlock()
	st := &fakeStatement{ids: ids, release: make(chan error)}
	f.entered <- st
	if err := <-st.release; err != nil {
		return nil, err
	}
	// Refuse every operation whose id ends in an odd digit.
	out := make([]store.Share, len(rs))
	for i, id := range ids {
		if (id[len(id)-1]-'0')%2 == 0 {
			out[i] = store.ShareTaken
		}
	}
	return out, nil
}

// after calls r and returns the statements f is given.
func (f *fakeShares) after(r store.Reservation, call func(store.Reservation)) chan *fakeStatement {
	call(r)
	return f.entered
}

func (g *shareGroups) waitingFor(k shareKey) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting[k])
}

// TestShareGroupsBatchWhileAStatementRuns: a share that finds no statement
// running for its budget is sent at once and alone; the shares that arrive
// while it runs wait and go together in the next statement, each answered
// with its own outcome (or the statement's error); another budget's share
// does not wait for this one's; and a budget whose statements are done has
// nothing left waiting.
func TestShareGroupsBatchWhileAStatementRuns(t *testing.T) {
	t.Parallel()
	f := &fakeShares{entered: make(chan *fakeStatement, 16)}
	g := newShareGroups(f.send)
	ctx := t.Context()
	share := func(name, id string) store.Reservation {
		return store.Reservation{Tenant: "acme", Name: name, OperationID: id, MaxCount: 10, Window: time.Hour, MaxUses: 100}
	}
	type answer struct {
		id    string
		share store.Share
		err   error
	}
	answers := make(chan answer, 16)
	call := func(r store.Reservation) {
		go func() {
			s, err := g.reserve(ctx, nil, r)
			answers <- answer{r.OperationID, s, err}
		}()
	}

	first := <-f.after(share("tenant_wide", "op_0"), call)
	require.Equal(t, []string{"op_0"}, first.ids, "alone: nothing else was waiting")
	k := keyOf(share("tenant_wide", ""))
	for i := 1; i <= 5; i++ {
		call(share("tenant_wide", fmt.Sprintf("op_%d", i)))
	}
	require.Eventually(t, func() bool { return g.waitingFor(k) == 5 }, 10*time.Second, time.Millisecond)

	// Another budget's share is sent while this one's statement runs.
	other := <-f.after(share("other", "op_9"), call)
	require.Equal(t, []string{"op_9"}, other.ids)
	other.release <- nil
	require.Equal(t, answer{"op_9", store.ShareRefused, nil}, <-answers)

	first.release <- nil
	require.Equal(t, answer{"op_0", store.ShareTaken, nil}, <-answers)
	five := <-f.entered
	require.ElementsMatch(t, []string{"op_1", "op_2", "op_3", "op_4", "op_5"}, five.ids, "the five waiting, in one statement")
	five.release <- nil
	got := map[string]store.Share{}
	for range 5 {
		a := <-answers
		require.NoError(t, a.err)
		got[a.id] = a.share
	}
	require.Equal(t, map[string]store.Share{"op_1": store.ShareRefused, "op_2": store.ShareTaken, "op_3": store.ShareRefused,
		"op_4": store.ShareTaken, "op_5": store.ShareRefused}, got, "each its own outcome")

	// A statement's error answers every share it carried.
	alone := <-f.after(share("tenant_wide", "op_10"), call)
	call(share("tenant_wide", "op_12"))
	call(share("tenant_wide", "op_14"))
	require.Eventually(t, func() bool { return g.waitingFor(k) == 2 }, 10*time.Second, time.Millisecond)
	alone.release <- nil
	require.Equal(t, answer{"op_10", store.ShareTaken, nil}, <-answers)
	two := <-f.entered
	require.Len(t, two.ids, 2)
	down := errors.New("database down")
	two.release <- down
	for range 2 {
		require.ErrorIs(t, (<-answers).err, down)
	}

	g.mu.Lock()
	require.Empty(t, g.waiting, "no budget left marked as running")
	g.mu.Unlock()
	require.Len(t, f.batches, 5)
}

// TestShareGroupsSenderPanics: a statement whose sender panics answers the
// other shares it carried with an error instead of leaving them waiting,
// and the budget's next share is sent.
func TestShareGroupsSenderPanics(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	calls := 0
	g := newShareGroups(func(_ context.Context, _ *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1:
			entered <- struct{}{}
			<-release
		case 2:
			panic("boom")
		}
		return make([]store.Share, len(rs)), nil
	})
	share := func(id string) store.Reservation {
		return store.Reservation{Tenant: "acme", Name: "b", OperationID: id, MaxCount: 1, Window: time.Hour, MaxUses: 10}
	}
	outcomes := make(chan any, 3)
	call := func(id string) {
		go func() {
			defer func() {
				if p := recover(); p != nil {
					outcomes <- p
				}
			}()
			_, err := g.reserve(t.Context(), nil, share(id))
			outcomes <- err
		}()
	}
	call("op_1")
	<-entered
	call("op_2")
	call("op_3")
	require.Eventually(t, func() bool { return g.waitingFor(keyOf(share(""))) == 2 }, 10*time.Second, time.Millisecond)
	close(release)
	require.Nil(t, <-outcomes, "op_1's own statement")
	got := []any{<-outcomes, <-outcomes}
	require.Contains(t, got, any("boom"), "the sender's own call panics")
	require.Contains(t, got, any(errShareNotSent), "the share it carried is answered")
	_, err := g.reserve(t.Context(), nil, share("op_4"))
	require.NoError(t, err, "the budget's next share is sent")
}

// TestShareGroupsShortAnswer: a statement that answers fewer outcomes than
// it carried shares answers each of them with an error rather than a wrong
// outcome, and leaves the budget free for the next.
func TestShareGroupsShortAnswer(t *testing.T) {
	t.Parallel()
	short := true
	g := newShareGroups(func(_ context.Context, _ *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
		if short {
			return nil, nil
		}
		return make([]store.Share, len(rs)), nil
	})
	r := store.Reservation{Tenant: "acme", Name: "b", OperationID: "op_1", MaxCount: 1, Window: time.Hour, MaxUses: 10}
	_, err := g.reserve(t.Context(), nil, r)
	require.ErrorContains(t, err, "0 outcomes for a statement of 1 budget shares")
	short = false
	_, err = g.reserve(t.Context(), nil, r)
	require.NoError(t, err)
}
