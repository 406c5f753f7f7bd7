package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"

	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// floor runs get or execute-replay against a floor server.
func (e *env) floor(ctx context.Context, fs *floorServer, sc string, conc int) Result {
	cl := fs.clients
	md, _ := metadata.FromOutgoingContext(cl.auth)
	var op opFunc
	switch sc {
	case ScenarioGet:
		op = func(ctx context.Context, w, _ int) error {
			_, err := cl.client(w).Get(metadata.NewOutgoingContext(ctx, md), &opledgerv1.GetRequest{OperationId: syntheticID(1 + rand.IntN(e.opts.Seed))})
			return err
		}
	case ScenarioExecuteReplay:
		op = func(ctx context.Context, w, _ int) error {
			_, err := cl.client(w).Execute(metadata.NewOutgoingContext(ctx, md), &opledgerv1.ExecuteRequest{OperationId: syntheticID(1 + rand.IntN(e.opts.Seed))})
			return err
		}
	default:
		return Result{Workload: "none"}
	}
	m, cpu := e.runClosedCPU(ctx, cpuProcs{server: cl.pids}, conc, e.opts.Duration, op)
	r := m.result()
	r.CPU = cpu
	r.Workload = "canned " + sc
	return r
}

// profile runs every scenario once more against the in-process server at
// the profile concurrency, with a CPU profile of the whole process per
// scenario (the load generator's goroutines are in it too: focus on
// server, ledger, store, interceptors and pgx), and records which
// statements each op cost.
func (e *env) profile(ctx context.Context, rep *Report) error {
	o := e.opts
	if err := os.MkdirAll(o.CPUProfileDir, 0o755); err != nil {
		return err
	}
	cl := e.clients
	if o.Binary != "" {
		c, err := dialClients([]string{e.stack.addr}, e.apiKey, e.opts.GRPCConns)
		if err != nil {
			return err
		}
		defer c.close()
		cl = c
	}
	for _, sc := range o.Scenarios {
		// The heap profile counts allocations since the process started:
		// one written before and one after the run, to read with -base.
		if err := writeAllocs(filepath.Join(o.CPUProfileDir, sc+".allocs-before.pprof")); err != nil {
			return err
		}
		path := filepath.Join(o.CPUProfileDir, sc+".pprof")
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		r := e.measureOpledgerOn(ctx, cl, dbMain, 1, o.Seed, sc, o.ProfileConcurrency, o.Duration, true, true)
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return err
		}
		if err := writeAllocs(filepath.Join(o.CPUProfileDir, sc+".allocs.pprof")); err != nil {
			return err
		}
		if st, err := e.pgStatTop(ctx, dbMain, r.total); err == nil {
			rep.Statements[sc] = st
		}
		r.System = "opledger (in-process)"
		rep.InProcess = append(rep.InProcess, r)
		rep.Profiles = append(rep.Profiles, path)
		e.progress("%-15s %-10s c=%-3d %s  profile %s", sc, "in-process", o.ProfileConcurrency, r.brief(), path)
	}
	// The peer's statements for the same job, for comparison.
	if e.dbos != nil && (slices.Contains(o.Scenarios, ScenarioExecuteNew) || slices.Contains(o.Scenarios, ScenarioOneCall)) {
		if err := e.pgStatReset(ctx); err == nil {
			r := e.dbosMeasure(ctx, ScenarioExecuteNew, o.ProfileConcurrency)
			if st, err := e.pgStatTop(ctx, dbDBOS, r.total); err == nil && r.total > 0 {
				rep.Statements[StatementsDBOS] = st
			}
		}
	}
	return nil
}

// StatementsDBOS keys DBOS's statements for a new workflow in
// Report.Statements.
const StatementsDBOS = "dbos execute-new"

// writeAllocs writes the process's allocation profile (cumulative since it
// started) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(allocsProfile(f, 0), f.Close())
}

// allocsProfile writes the allocation profile in pprof's debug format,
// after a collection: the runtime publishes allocations to the profile only
// at the end of one, so without it the profile written after a scenario
// misses the scenario's last allocations and the next scenario's diff
// counts them (TestAllocsProfileIsCurrent).
func allocsProfile(w io.Writer, debug int) error {
	runtime.GC()
	return pprof.Lookup("allocs").WriteTo(w, debug)
}
