package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/opledger/opledger/service"
)

// receiptsTargets are issue 37's goal: with receipts on, execute-new and
// execute-one-call keep at least min × the throughput of the same servers
// with receipts off (SystemOpledgerNoReceipts), in the same run.
var receiptsTargets = []struct {
	sc  string
	min float64
}{
	{ScenarioExecuteNew, 0.95},
	{ScenarioOneCall, 0.95},
}

// startNoReceipts starts SystemOpledgerNoReceipts: servers like the ones
// under test (serve children, or one in this process), on the same
// database, with receipts off.
func (e *env) startNoReceipts(ctx context.Context) error {
	var addrs []string
	var pids []int
	if e.opts.Binary == "" {
		st, err := startStack(ctx, e.cluster.URL(dbMain), e.toolsYAML, e.secret, e.opts.DBConns, 0,
			filepath.Join(e.dir, "inprocess-no-receipts.log"), func(c *service.Config) { c.AuditNoReceipts = true })
		if err != nil {
			return err
		}
		e.closers = append(e.closers, st.stop)
		addrs = []string{st.addr}
	} else {
		for i := range e.opts.Processes {
			p, err := e.startServe(ctx, i, dbMain, true, "OPLEDGER_AUDIT_NO_RECEIPTS=true")
			if err != nil {
				return err
			}
			addrs, pids = append(addrs, p.addr), append(pids, p.cmd.Process.Pid)
		}
	}
	cl, err := dialClients(addrs, e.apiKey, e.opts.GRPCConns)
	if err != nil {
		return err
	}
	cl.pids = pids
	e.noReceipts = cl
	e.closers = append(e.closers, cl.close)
	return nil
}

// ReceiptsTargets evaluates receiptsTargets on r at the targets' level
// (targetConc), with the CPU per op of both sides by
// process: where the receipts' cost goes.
func (r *Report) ReceiptsTargets() []Target {
	var ts []Target
	us := func(c *CPUCost) string {
		if c == nil {
			return "CPU not accounted"
		}
		return fmt.Sprintf("server %d + PostgreSQL %d µs/op", c.Server.Microseconds(), c.Postgres.Microseconds())
	}
	conc := r.targetConc()
	if c := r.Checkpoint; c != nil {
		ts = append(ts, Target{Met: met(true), Text: fmt.Sprintf("checkpoint task (informative): %d chain heads signed in %d checkpoints, %s wall; "+
			"CPU: checkpointer %d µs + PostgreSQL %d µs per head", c.Heads, c.Checkpoints, c.Wall.Round(time.Millisecond),
			c.Task.Microseconds()/int64(max(c.Heads, 1)), c.Postgres.Microseconds()/int64(max(c.Heads, 1)))})
	}
	for _, x := range receiptsTargets {
		text := fmt.Sprintf("%s with receipts ≥ %.2f × receipts off (c=%d)", x.sc, x.min, conc)
		o, okO := r.at(x.sc, SystemOpledger, conc)
		b, okB := r.at(x.sc, SystemOpledgerNoReceipts, conc)
		if !okO || !okB {
			ts = append(ts, Target{Text: text + ": not measured in this run"})
			continue
		}
		q, qt := ratioOf(o, b)
		ts = append(ts, Target{Met: met(q >= x.min), Text: fmt.Sprintf("%s: %s (%s vs %s)%s", text, qt,
			us(o.CPU), us(b.CPU), byRound(o, b, "%.2f", opsRatio))})
	}
	return ts
}

// CheckpointCost is what signing the checkpoints of every chain head a run
// changed cost: the checkpoint task's work for that many operations, which
// with a checkpoint a minute a server does once per head changed in the
// minute.
type CheckpointCost struct {
	Heads, Checkpoints int
	Wall               time.Duration
	// Task is the checkpointer's CPU (it runs in the bench's process, which
	// is idle meanwhile), Postgres every PostgreSQL process's.
	Task, Postgres time.Duration
}

// measureCheckpoint signs checkpoints of the main database's chain heads,
// every one the run wrote (no checkpoint ran before: the servers have no
// key), in this process with a throwaway key, and records their cost.
func (e *env) measureCheckpoint(ctx context.Context, rep *Report) error {
	skey, _, err := note.GenerateKey(rand.Reader, "bench")
	if err != nil {
		return err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return err
	}
	cp := service.Checkpointer{Store: e.stack.store, Signer: signer, Interval: time.Minute, Log: slog.New(slog.DiscardHandler)}
	a, err := e.cpuNow(cpuProcs{})
	if err != nil {
		return err
	}
	start := time.Now()
	c := CheckpointCost{}
	for {
		last, err := cp.Once(ctx)
		if err != nil {
			return fmt.Errorf("bench: checkpoint: %w", err)
		}
		if last == nil {
			break
		}
		// The first checkpoints of the database: their number is the last's
		// seq, their leaves its size.
		c.Checkpoints, c.Heads = int(last.Seq), int(last.Size)
	}
	c.Wall = time.Since(start)
	b, err := e.cpuNow(cpuProcs{})
	if err != nil {
		return err
	}
	c.Task, c.Postgres = b.bench-a.bench, b.postgres-a.postgres
	rep.Checkpoint = &c
	e.progress("checkpoint: %d heads in %d checkpoints, %s, CPU task %s + PostgreSQL %s", c.Heads, c.Checkpoints,
		c.Wall.Round(time.Millisecond), c.Task, c.Postgres)
	return nil
}
