package chaos

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// settleParallelism is how many operations the settle phase works on at
// once.
const settleParallelism = 16

// parallel runs f over items with bounded concurrency.
func parallel[T any](items []T, f func(T)) {
	ch := make(chan T)
	var wg sync.WaitGroup
	for range settleParallelism {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				f(it)
			}
		}()
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
}

// settle runs once every fault is healed: it learns the operation of every
// key whose Prepare never answered (by preparing again, which replays),
// lets the reconcilers work and nudges leftovers with Reconcile (and
// Execute for operations the reconciler made READY again), bounded by
// SettleTimeout, then reads every operation's final state.
func (r *Runner) settle(ctx context.Context) (map[string]FinalOp, error) {
	tracked := r.trackedOps()
	var orphans []*trackedOp
	refused := 0
	for _, t := range tracked {
		t.mu.Lock()
		no := t.refused != ""
		t.mu.Unlock()
		switch {
		case no:
			// Refused by a budget or an identity: nothing was stored.
			refused++
		case t.opID() == "":
			orphans = append(orphans, t)
		}
	}
	r.logf("settle: %d operations, %d keys whose Prepare never answered, %d refused by a limit or an identity", len(tracked), len(orphans), refused)
	parallel(orphans, func(t *trackedOp) {
		for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
			a := r.call(ctx, "settle", "prepare", r.servers[attempt%len(r.servers)], t, "", r.agent, 0, prepareRPC(t))
			if a.err == nil {
				t.setOp(a.op)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})

	byID := map[string]*trackedOp{}
	var pending []*trackedOp
	for _, t := range tracked {
		if id := t.opID(); id != "" {
			byID[id] = t
			pending = append(pending, t)
		}
	}
	pol := policies()
	deadline := time.Now().Add(r.opts.SettleTimeout)
	reconciled, renewed := map[string]int{}, map[string]int{}
	var mu sync.Mutex
	for round := 0; len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil; round++ {
		var next []*trackedOp
		parallel(pending, func(t *trackedOp) {
			s := r.servers[(round+len(t.key))%len(r.servers)]
			a := r.call(ctx, "settle", "get", s, t, t.opID(), r.agent, 0, getRPC(t.opID()))
			if status.Code(a.err) == codes.NotFound {
				// Lost with a failover. An agent prepares it again under
				// its idempotency key; then it is settled like the rest.
				if r.ha != nil && r.ha.redo(ctx, s, t) {
					mu.Lock()
					next = append(next, t)
					mu.Unlock()
				}
				return
			}
			if a.err != nil {
				mu.Lock()
				next = append(next, t)
				mu.Unlock()
				return
			}
			again := false
			switch stateName(a.op) {
			case StateExecuting:
				// The reconciler takes it once the lease expires; Reconcile
				// says "held until …" before that.
				r.call(ctx, "settle", "reconcile", s, t, t.opID(), r.agent, 0, reconcileRPC(t.opID()))
				again = true
			case StateOutcomeUnknown:
				mu.Lock()
				reconciled[t.opID()]++
				n := reconciled[t.opID()]
				mu.Unlock()
				// Where the outcome is undecidable one lookup says so; a
				// deduping tool with a lookup must end up resolved.
				if !pol[t.tool].AllowUnknown || n <= 2 {
					r.call(ctx, "settle", "reconcile", s, t, t.opID(), r.agent, 0, reconcileRPC(t.opID()))
					again = true
				}
			case StateReady:
				// Made READY again by a reconciliation that found nothing
				// (or never executed): finish it.
				if t.intent == intentRun {
					r.call(ctx, "settle", "execute", s, t, t.opID(), r.agent, 0, executeRPC(t.opID(), 3*time.Second))
					again = true
				}
			case StateAwaitingApproval:
				// An approval that lapsed (or was never given, the agent
				// having run out of time): the approver approves it again,
				// and the next round executes it.
				mu.Lock()
				renewed[t.opID()]++
				n := renewed[t.opID()]
				mu.Unlock()
				if t.intent == intentRun && n <= 5 {
					t.mu.Lock()
					fp := t.fingerprint
					t.mu.Unlock()
					r.call(ctx, "settle", "approve", s, t, t.opID(), r.approver, 0, approveRPC(t.opID(), fp, opledgerv1.Decision_DECISION_APPROVE))
					again = true
				}
			}
			if again {
				mu.Lock()
				next = append(next, t)
				mu.Unlock()
			}
		})
		pending = next
		if len(pending) > 0 {
			sleepCtx(ctx, 500*time.Millisecond)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(pending) > 0 {
		r.logf("settle: %d operations still unresolved after %s", len(pending), r.opts.SettleTimeout)
	}

	// Read every operation the workload tracked and every one a client was
	// told about (they are the same unless a server made one up).
	type target struct{ id, tool, key, intent string }
	var targets []target
	seen := map[string]bool{}
	for _, t := range tracked {
		if id := t.opID(); id != "" && !seen[id] {
			seen[id] = true
			targets = append(targets, target{id, t.tool, KeyDigest(t.key), t.intent})
		}
	}
	for _, e := range r.hist.Observations() {
		if !seen[e.Op] {
			seen[e.Op] = true
			targets = append(targets, target{e.Op, e.Tool, e.Key, "untracked"})
		}
	}
	final := map[string]FinalOp{}
	parallel(targets, func(t target) {
		f := FinalOp{ID: t.id, Tool: t.tool, Unreadable: true}
		for attempt := 0; attempt < 10 && ctx.Err() == nil; attempt++ {
			s := r.servers[attempt%len(r.servers)]
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			resp, err := s.client.Get(authCtx(cctx, r.agent), &opledgerv1.GetRequest{OperationId: t.id, IncludeEvents: true})
			cancel()
			if err == nil {
				op := resp.GetOperation()
				f = FinalOp{ID: t.id, Tool: op.GetTool(), State: stateName(op), ExternalRef: op.GetExternalRef(), DownstreamKey: op.GetDownstreamKey(),
					Fingerprint: op.GetFingerprint(), ApprovedFingerprint: op.GetApproval().GetApprovedFingerprint(),
					Decision: strings.TrimPrefix(op.GetApproval().GetDecision().String(), "DECISION_")}
				if f.Decision == "UNSPECIFIED" {
					f.Decision = ""
				}
				for _, e := range resp.GetEvents() {
					f.Events = append(f.Events, OpEvent{Seq: e.GetSeq(), Type: strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_"),
						Fence: e.GetFence(), Actor: e.GetActor(), At: e.GetCreateTime().AsTime()})
				}
				break
			}
			if status.Code(err) == codes.NotFound {
				f.Missing = true
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		r.record(Event{Type: EventFinal, Process: "checker", Tool: f.Tool, Key: t.key, Op: t.id, State: f.State, Ref: f.ExternalRef,
			Detail: "intent " + t.intent, Events: f.Events})
		mu.Lock()
		final[t.id] = f
		mu.Unlock()
	})
	return final, nil
}
