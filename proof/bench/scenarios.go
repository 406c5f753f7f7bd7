package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// keySeq makes idempotency keys unique across the whole run.
var keySeq atomic.Int64

// runID keeps keys of different runs against one database apart.
var runID = randomHex(4)

func newKey(prefix string) string { return fmt.Sprintf("%s-%s-%d", prefix, runID, keySeq.Add(1)) }

// chargeArgs are the arguments of every prepared operation.
var chargeArgs = func() *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"})
	if err != nil {
		panic(err)
	}
	return s
}()

// stormWait bounds how long a duplicate waits for the outcome.
var stormWait = durationpb.New(10 * time.Second)

func prepareOp(ctx context.Context, cl opledgerv1.LedgerServiceClient, auth context.Context) (string, error) {
	ctx = metadata.NewOutgoingContext(ctx, withKey(auth, newKey("b")))
	r, err := cl.Prepare(ctx, &opledgerv1.PrepareRequest{Tool: toolName, Args: chargeArgs})
	if err != nil {
		return "", err
	}
	if r.GetReplayed() || r.GetOperation().GetState() != opledgerv1.State_STATE_READY {
		return "", fmt.Errorf("prepare: unexpected answer: state %s, replayed %t", r.GetOperation().GetState(), r.GetReplayed())
	}
	return r.GetOperation().GetId(), nil
}

func withKey(auth context.Context, key string) metadata.MD {
	md, _ := metadata.FromOutgoingContext(auth)
	md = md.Copy()
	md.Set("idempotency-key", key)
	return md
}

func executeOp(ctx context.Context, cl opledgerv1.LedgerServiceClient, auth context.Context, id string, wantReplay bool, wait *durationpb.Duration) (string, error) {
	md, _ := metadata.FromOutgoingContext(auth)
	r, err := cl.Execute(metadata.NewOutgoingContext(ctx, md), &opledgerv1.ExecuteRequest{OperationId: id, Wait: wait})
	if err != nil {
		return "", err
	}
	op := r.GetOperation()
	if op.GetState() != opledgerv1.State_STATE_SUCCEEDED || op.GetExternalRef() == "" {
		return "", fmt.Errorf("execute: state %s, external ref %q", op.GetState(), op.GetExternalRef())
	}
	if wantReplay && !r.GetReplayed() {
		return "", errors.New("execute: a succeeded operation was not replayed")
	}
	return op.GetExternalRef(), nil
}

// oneCallOp prepares and executes a new operation of tool in one call
// (Prepare with execute).
func oneCallOp(ctx context.Context, cl opledgerv1.LedgerServiceClient, auth context.Context, tool string) (string, error) {
	ctx = metadata.NewOutgoingContext(ctx, withKey(auth, newKey("o")))
	r, err := cl.Prepare(ctx, &opledgerv1.PrepareRequest{Tool: tool, Args: chargeArgs, Execute: true})
	if err != nil {
		return "", err
	}
	op := r.GetOperation()
	if r.GetReplayed() || r.GetExecutionReplayed() || op.GetState() != opledgerv1.State_STATE_SUCCEEDED || op.GetExternalRef() == "" {
		return "", fmt.Errorf("prepare with execute: state %s, external ref %q, replayed %t/%t", op.GetState(), op.GetExternalRef(),
			r.GetReplayed(), r.GetExecutionReplayed())
	}
	return op.GetExternalRef(), nil
}

// scenarioOneCallPolicy is the one-call job on policyToolName: what
// SystemOpledgerPolicy runs for ScenarioOneCall.
const scenarioOneCallPolicy = ScenarioOneCall + "-policy"

// syntheticID is the id of the i-th synthetic operation (see seedSynthetic).
func syntheticID(i int) string { return fmt.Sprintf("op_zz%024d", i) }

// opledgerOp returns scenario sc's op against cl, choosing replayed and read
// operations among the pool synthetic ones from the from-th on.
func opledgerOp(cl *clients, sc string, from, pool int) opFunc {
	switch sc {
	case ScenarioPrepare:
		return func(ctx context.Context, w, _ int) error {
			_, err := prepareOp(ctx, cl.client(w), cl.auth)
			return err
		}
	case ScenarioExecuteNew:
		return func(ctx context.Context, w, _ int) error {
			id, err := prepareOp(ctx, cl.client(w), cl.auth)
			if err != nil {
				return err
			}
			_, err = executeOp(ctx, cl.client(w), cl.auth, id, false, nil)
			return err
		}
	case ScenarioOneCall, scenarioOneCallPolicy:
		tool := toolName
		if sc == scenarioOneCallPolicy {
			tool = policyToolName
		}
		return func(ctx context.Context, w, _ int) error {
			_, err := oneCallOp(ctx, cl.client(w), cl.auth, tool)
			return err
		}
	case ScenarioExecuteReplay:
		return func(ctx context.Context, w, _ int) error {
			_, err := executeOp(ctx, cl.client(w), cl.auth, syntheticID(from+rand.IntN(pool)), true, nil)
			return err
		}
	case ScenarioGet:
		return func(ctx context.Context, w, _ int) error {
			md, _ := metadata.FromOutgoingContext(cl.auth)
			id := syntheticID(from + rand.IntN(pool))
			r, err := cl.client(w).Get(metadata.NewOutgoingContext(ctx, md), &opledgerv1.GetRequest{OperationId: id})
			if err == nil && r.GetOperation().GetId() != id {
				err = fmt.Errorf("get: asked for %s, got %s", id, r.GetOperation().GetId())
			}
			return err
		}
	}
	return nil
}

// measureOpledger runs scenario sc at concurrency conc against cl and,
// with countDB, counts the statements database db executed per op.
func (e *env) measureOpledger(ctx context.Context, cl *clients, sc string, conc int, countDB bool) Result {
	return e.measureOpledgerOn(ctx, cl, dbMain, 1, e.opts.Seed, sc, conc, e.opts.Duration, countDB, true)
}

// With warm, execute-replay first replays every operation of the pool once
// on every server (see warmReplays).
func (e *env) measureOpledgerOn(ctx context.Context, cl *clients, db string, from, pool int, sc string, conc int, dur time.Duration, countDB, warm bool) Result {
	if sc == ScenarioExecuteReplay && warm {
		if err := warmReplays(ctx, cl, pool); err != nil {
			return Result{Scenario: sc, System: SystemOpledger, Concurrency: conc, Errors: 1, FirstError: err.Error()}
		}
	}
	if countDB {
		if err := e.pgStatReset(ctx); err != nil {
			countDB = false
		}
	}
	var m measurement
	// A storm's window is the sum of its rounds, not a stretch of wall-clock
	// time, so its CPU is not accounted.
	var cpu *CPUCost
	if sc == ScenarioDuplicateStorm {
		m = runStorm(ctx, conc, e.opts.warmup(), dur, func(ctx context.Context, k int) ([]string, error) {
			ids := make([]string, k)
			for i := range ids {
				id, err := prepareOp(ctx, cl.client(i), cl.auth)
				if err != nil {
					return nil, err
				}
				ids[i] = id
			}
			return ids, nil
		}, func(ctx context.Context, w int, id string) (string, error) {
			return executeOp(ctx, cl.client(w), cl.auth, id, false, stormWait)
		})
	} else {
		m, cpu = e.runClosedCPU(ctx, cpuProcs{server: cl.pids}, conc, dur, opledgerOp(cl, sc, from, pool))
	}
	r := m.result()
	r.CPU = cpu
	r.Scenario, r.System, r.Concurrency, r.total = sc, SystemOpledger, conc, m.total
	if countDB && m.total > 0 {
		if calls, err := e.pgStatCalls(ctx, db); err == nil {
			r.DBCallsPerOp = float64(calls) / float64(m.total)
		}
	}
	return r
}

// warmReplays executes each of the pool's operations once on every server,
// once per clients, before they are replayed for measurement. The synthetic
// operations were written with psql, so no server has seen them finish; in
// service a replay follows an execution or an earlier replay, and the
// server that saw either answers from its finished-operation cache. Without
// the warm-up a short measurement would mostly time first reads.
func warmReplays(ctx context.Context, cl *clients, pool int) error {
	if cl.warmed {
		return nil
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > pool || ctx.Err() != nil {
					return
				}
				for s := range cl.servers {
					// A bounded call: a stuck replay must show up as an error
					// in the report, not as a benchmark that never ends.
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := executeOp(cctx, cl.ledg[(w*cl.servers+s)%len(cl.ledg)], cl.auth, syntheticID(i), true, nil)
					cancel()
					if err != nil {
						errs <- fmt.Errorf("warm-up replay of %s: %w", syntheticID(i), err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	cl.warmed = true
	return ctx.Err()
}

// stormSize is how many operations each storm round shares among its
// clients: a few, so that most calls are duplicates.
func stormSize(conc int) int { return min(4, conc) }

// runStorm runs rounds until warmup + dur of round time has passed: each
// round prepares a few fresh operations (not timed), then all conc workers
// execute them at once, worker w the (w mod k)-th. Every answer for one
// operation must carry the same external reference, or the round counts an
// error.
func runStorm(ctx context.Context, conc int, warmup, dur time.Duration,
	prepare func(ctx context.Context, k int) ([]string, error),
	exec func(ctx context.Context, w int, id string) (string, error)) measurement {
	var m measurement
	k := stormSize(conc)
	var elapsed time.Duration
	for elapsed < warmup+dur && ctx.Err() == nil && m.errors <= 100 {
		ids, err := prepare(ctx, k)
		if err != nil {
			m.errors++
			m.firstError = "prepare: " + err.Error()
			continue
		}
		lat := make([]time.Duration, conc)
		refs := make([]string, conc)
		errs := make([]error, conc)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				refs[w], errs[w] = exec(ctx, w, ids[w%k])
				lat[w] = time.Since(t0)
			}()
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		round := time.Since(t0)
		elapsed += round
		m.total += conc
		seen := map[string]string{}
		for w := range conc {
			if errs[w] == nil {
				id := ids[w%k]
				if prev, ok := seen[id]; ok && prev != refs[w] {
					errs[w] = fmt.Errorf("storm: two answers for one operation: %s and %s", prev, refs[w])
				}
				seen[id] = refs[w]
			}
			if errs[w] != nil {
				m.errors++
				if m.firstError == "" {
					m.firstError = errs[w].Error()
				}
			}
		}
		if elapsed <= warmup {
			continue
		}
		m.window += round
		for w := range conc {
			if errs[w] == nil {
				m.latencies = append(m.latencies, lat[w])
			}
		}
	}
	m.ops = len(m.latencies)
	return m
}
