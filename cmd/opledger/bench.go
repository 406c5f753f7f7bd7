package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/opledger/opledger/proof/bench"
)

// cmdBench runs the benchmark against real `opledger serve` processes (this
// very binary) and prints the comparison table. It fails when a measurement
// broke (errors, or no op completed), never because of the numbers.
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer, _ func(string) string) error {
	fs := newFlagSet("bench", "[flags]", `
Measures opledger's throughput and latency against baselines (pgbench
running opledger's own statements, a bare gRPC server, the interceptor
chain, DBOS, the one-call job under a three-rule policy) on a throwaway
PostgreSQL, with real serve processes of this binary, and prints the
comparison table with CPU time per operation
(docs/performance.md). It fails only when a measurement broke, never
because of the numbers.`)
	var o bench.Options
	fs.BoolVar(&o.Quick, "quick", false, "fewer concurrency levels and 1s measurements (five rounds at the targets' points): shows that everything works, in about four minutes")
	conc := fs.String("concurrency", "", "comma-separated client `counts` (default 1,4,16,64; quick: 1,16)")
	fs.DurationVar(&o.Duration, "duration", 0, "length of each measurement (default 5s; quick: 1s)")
	fs.IntVar(&o.Grow, "grow", 0, "also bulk-load this many operations and measure execute-replay at 10 thousand and at N")
	out := fs.String("out", "", "also write the report to this `FILE`: Markdown, or JSON if the name ends in .json")
	fs.StringVar(&o.CPUProfileDir, "cpuprofile-dir", "", "write one CPU profile per scenario (in-process server) into this `DIR`")
	fs.IntVar(&o.ProfileConcurrency, "profile-concurrency", 0, "client count of the profiled runs (default: the sweep's highest up to 16)")
	fs.IntVar(&o.Processes, "processes", 1, "number of serve processes sharing the database")
	fs.IntVar(&o.Repeat, "repeat", 1, "measure every point this many times and keep the median (tames a busy machine)")
	fs.BoolVar(&o.Duet, "duet", false, "also measure the receipts targets' points with both sides at once, and a control (informative; docs/performance.md, finding 46)")
	fs.IntVar(&o.TargetRepeat, "target-repeat", 0, "measure the points the targets are read at (16 clients) at least this many times (default: 5 with --quick, else --repeat)")
	fs.IntVar(&o.DBConns, "db-conns", 16, "connection pool size of each server and of DBOS")
	fs.IntVar(&o.GRPCConns, "grpc-conns", 1, "gRPC connections the load generator opens to each server (one client's channel: one)")
	scen := fs.String("scenarios", "", "comma-separated `list`, a subset of: "+strings.Join(bench.Scenarios, ", "))
	base := fs.String("baselines", "", "comma-separated `list`, a subset of: "+strings.Join(bench.Baselines, ", "))
	fs.StringVar(&o.Dir, "dir", "", "working `DIR` for the cluster and logs (default: a temporary one, removed)")
	inProcess := fs.Bool("in-process", false, "serve from this process instead of serve child processes")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *conc != "" {
		for _, f := range strings.Split(*conc, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("bench: --concurrency: %q is not a number", f)
			}
			o.Concurrency = append(o.Concurrency, n)
		}
	}
	if *scen != "" {
		o.Scenarios = strings.Split(*scen, ",")
	}
	if *base != "" {
		o.Baselines = strings.Split(*base, ",")
	}
	if !*inProcess {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this executable to run `serve`: %w", err)
		}
		o.Binary = exe
	}
	if o.CPUProfileDir != "" {
		abs, err := filepath.Abs(o.CPUProfileDir)
		if err != nil {
			return err
		}
		o.CPUProfileDir = abs
	}
	o.Progress = stderr
	rep, err := bench.Run(ctx, o)
	if rep != nil {
		fmt.Fprintln(stdout)
		rep.WriteTable(stdout)
		if *out != "" {
			if werr := writeReport(rep, *out); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err != nil {
		return err
	}
	if f := rep.Failures(); len(f) > 0 {
		return fmt.Errorf("bench: %d measurement(s) broke:\n  %s", len(f), strings.Join(f, "\n  "))
	}
	return nil
}

func writeReport(rep *bench.Report, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if strings.HasSuffix(path, ".json") {
		err = rep.WriteJSON(f)
	} else {
		rep.WriteMarkdown(f)
	}
	return errors.Join(err, f.Close())
}

// cmdBenchFloor is the benchmark's floor child (not listed in the usage:
// only `opledger bench` starts it): a gRPC server answering canned
// responses, bare or behind the interceptor chain, in a process of its own
// like the servers it is compared with, and with their garbage collector
// target (OPLEDGER_GC_PERCENT, or serve's default; GOGC wins), so that the
// chain floor runs the chain as a server runs it.
func cmdBenchFloor(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("bench-floor", "[flags]", `
The benchmark's floor child, started only by 'opledger bench': a gRPC
server answering canned responses, bare or behind the interceptor chain.`)
	cfg := bench.FloorConfig{DatabaseURL: getenv("DATABASE_URL"), ToolsFile: getenv("OPLEDGER_TOOLS"),
		SecretHex: getenv("OPLEDGER_DOWNSTREAM_SECRET")}
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "address `HOST:PORT`")
	fs.StringVar(&cfg.CannedDir, "canned", "", "`DIR` holding the canned answers")
	fs.BoolVar(&cfg.Chain, "chain", false, "run the interceptor chain (authenticating against DATABASE_URL)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	percent, set, err := floorGCPercent(getenv)
	if err != nil {
		return err
	}
	if set {
		debug.SetGCPercent(percent)
	}
	return bench.ServeFloor(ctx, cfg)
}

// floorGCPercent is the floor child's garbage collector target, and whether
// to set it: the one serve would set from the same environment
// (OPLEDGER_GC_PERCENT, checked as serve checks it, or its default), unless
// GOGC is set.
func floorGCPercent(getenv func(string) string) (int, bool, error) {
	var cfg Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	finish := bindConfig(fs, &cfg, getenv)
	if err := fs.Parse(nil); err != nil {
		return 0, false, err
	}
	if err := finish(); err != nil {
		return 0, false, err
	}
	percent, ok := gcPercent(cfg, getenv)
	return percent, ok, nil
}
