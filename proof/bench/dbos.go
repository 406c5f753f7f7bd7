package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosPeer is the peer: DBOS Transact for Go doing opledger's job with its
// own machinery. The workflow id is the idempotency key; the workflow runs
// one step that charges through the fake processor with that key. DBOS runs
// in this process (it is a library), so its calls carry no RPC hop: the
// comparison favours it by the cost of the gRPC floor.
type dbosPeer struct {
	ctx        dbos.Context
	http       *http.Client
	fakepayURL string
	body       []byte

	mu   sync.Mutex
	done []string // completed workflow ids, for replays
}

// dbosPollInterval is how often a duplicate caller's handle polls for the
// first caller's result. DBOS's default is 1s; a latency-minded deployment
// lowers it, and so does the bench, so that the storm compares mechanisms
// rather than a default.
const dbosPollInterval = 5 * time.Millisecond

func startDBOS(ctx context.Context, dbURL, fakepayURL string) (*dbosPeer, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// The same pooling as opledger's HTTP executor.
	t.MaxIdleConnsPerHost = 16
	p := &dbosPeer{http: &http.Client{Transport: t, Timeout: 10 * time.Second}, fakepayURL: fakepayURL,
		body: []byte(`{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"}`)}
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
		AppName:     "opledger-bench",
		DatabaseURL: dbURL,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, fmt.Errorf("bench: dbos: %w", err)
	}
	p.ctx = dctx
	dbos.RegisterWorkflow(dctx, p.chargeWorkflow)
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("bench: dbos launch: %w", err)
	}
	return p, nil
}

func (p *dbosPeer) stop() { _ = dbos.Shutdown(p.ctx, 5*time.Second) }

// chargeWorkflow is the durable workflow: one step, the charge.
func (p *dbosPeer) chargeWorkflow(ctx dbos.Context, key string) (string, error) {
	return dbos.RunAsStep(ctx, func(c context.Context) (string, error) { return p.charge(c, key) }, dbos.WithStepName("charge"))
}

// charge POSTs the charge with key as its Idempotency-Key and returns the
// charge id, as opledger's HTTP executor does.
func (p *dbosPeer) charge(ctx context.Context, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.fakepayURL+"/charges", bytes.NewReader(p.body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("charge: HTTP %d: %s", resp.StatusCode, b)
	}
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.ID == "" {
		return "", fmt.Errorf("charge: no id in %s", b)
	}
	return c.ID, nil
}

// run starts (or joins, or replays) the workflow with id key and waits for
// its result.
func (p *dbosPeer) run(key string) (string, error) {
	h, err := dbos.RunWorkflow(p.ctx, p.chargeWorkflow, key, dbos.WithWorkflowID(key))
	if err != nil {
		return "", err
	}
	ref, err := h.GetResult(dbos.WithHandlePollingInterval(dbosPollInterval))
	if err != nil {
		return "", err
	}
	if ref == "" {
		return "", errors.New("dbos: empty result")
	}
	return ref, nil
}

// dbosWorkload names what DBOS runs for scenario sc: both ways of executing
// a new operation are one new workflow.
func dbosWorkload(sc string) string {
	if sc == ScenarioOneCall {
		return ScenarioExecuteNew
	}
	return sc
}

// dbosMeasure runs scenario sc's equivalent on DBOS.
func (e *env) dbosMeasure(ctx context.Context, sc string, conc int) Result {
	p := e.dbos
	var m measurement
	var cpu *CPUCost
	countDB := e.pgStatReset(ctx) == nil
	switch dbosWorkload(sc) {
	case ScenarioExecuteNew:
		m, cpu = e.runClosedCPU(ctx, cpuProcs{}, conc, e.opts.Duration, func(ctx context.Context, _, _ int) error {
			key := newKey("d")
			_, err := p.run(key)
			if err == nil {
				p.mu.Lock()
				if len(p.done) < 100_000 {
					p.done = append(p.done, key)
				}
				p.mu.Unlock()
			}
			return err
		})
	case ScenarioExecuteReplay:
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		if len(done) == 0 {
			// execute-new was not run: complete a few workflows to replay.
			for range 100 {
				key := newKey("d")
				if _, err := p.run(key); err != nil {
					return Result{Workload: "dbos workflow replay", Errors: 1, FirstError: err.Error()}
				}
				done = append(done, key)
			}
		}
		m, cpu = e.runClosedCPU(ctx, cpuProcs{}, conc, e.opts.Duration, func(ctx context.Context, _, _ int) error {
			_, err := p.run(done[rand.IntN(len(done))])
			return err
		})
	case ScenarioDuplicateStorm:
		m = runStorm(ctx, conc, e.opts.warmup(), e.opts.Duration, func(_ context.Context, k int) ([]string, error) {
			ids := make([]string, k)
			for i := range ids {
				ids[i] = newKey("ds")
			}
			return ids, nil
		}, func(_ context.Context, _ int, id string) (string, error) { return p.run(id) })
	default:
		return Result{Workload: "none"}
	}
	r := m.result()
	r.CPU, r.total = cpu, m.total
	r.Workload = "dbos workflow"
	if countDB && m.total > 0 {
		if calls, err := e.pgStatCalls(ctx, dbDBOS); err == nil {
			r.DBCallsPerOp = float64(calls) / float64(m.total)
		}
	}
	return r
}
