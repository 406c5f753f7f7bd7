package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/opledger/opledger/proof/chaos"
	"github.com/opledger/opledger/proof/failpoint"
)

// cmdChaos runs the fault-injection suite: three `opledger serve`
// processes of this very binary (so it must be built with
// `-tags failpoints` for crash points and --control), PostgreSQL and the fake
// processors, a workload, a nemesis and a checker. It prints the summary
// line and fails on any violation (with --control=NAME: unless the checker
// found the violations the re-introduced defect must cause).
func cmdChaos(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("chaos", "[flags]", `
Runs the fault-injection suite (docs/reliability.md): three serve processes
of this binary on one throwaway PostgreSQL, fake processors, a workload of
agents and a nemesis that crashes servers and injects database, network and
processor faults; then it checks every effect and every answer: each
approved operation has exactly one charge or is truthfully OUTCOME_UNKNOWN,
sent inside its approval. --control=NAME puts one fixed defect back instead
and requires the checker to catch it. Needs a binary built with -tags
failpoints.`)
	duration := fs.Duration("duration", time.Minute, "how long the workload and the nemesis run")
	ops := fs.Int("ops", 0, "run on past --duration until this many operations were started (0: no floor)")
	maxDuration := fs.Duration("max-duration", 0, "cap when --ops is not reached (default 4 × --duration)")
	var control controlFlag
	fs.Var(&control, "control", "a control run, --control=NAME: put one fixed defect back and require the checker to catch it; NAME is one of "+
		strings.Join(chaos.ControlNames(), ", ")+" (a bare --control is "+chaos.DefaultControl+")")
	withoutDefect := fs.Bool("without-defect", false, "with --control: stage the control's faults with its defect left out, and require a clean check (the control's violations must come from its defect)")
	seed := fs.Uint64("seed", 0, "seed for every random choice (0: random, printed)")
	history := fs.String("history", "", "write the JSON-lines history to this `FILE`")
	workers := fs.Int("workers", 16, "concurrent agents")
	rate := fs.Float64("failpoint-rate", 0.0005, "probability that each named failpoint kills a server on each hit (negative: scheduled crashes only)")
	requireAll := fs.Bool("require-all-faults", true, "fail when some fault kind was never injected")
	dir := fs.String("dir", "", "working `DIR` (default: a temporary one, removed after a clean run)")
	var failover failoverFlag
	unsafeWindows := fs.Bool("failover-unsafe-windows", false, "with --failover: let failovers follow a crash restart of the primary before its standby caught up, and heal partitions before the old primary was demoted (outcomes may then be lost even with synchronous replication; see docs/reliability.md)")
	fs.Var(&failover, "failover", "run PostgreSQL as a pg_auto_failover formation and kill and partition its primary during the run: --failover (synchronous replication) or --failover=async")
	auditVerify := fs.Bool("audit-verify", false, "after the check, verify every operation's receipts in the live tables (as audit verify --database) and fail on any break")
	auditTamper := fs.Bool("audit-tamper", false, "the control of --audit-verify: change one event in the tables first, and require the verification to report it")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if !failpoint.Enabled {
		return errors.New("chaos: this binary has no failpoints; build it with `go build -tags failpoints -o bin/opledger-chaos ./cmd/opledger` (the chaos suite re-executes itself as the servers)")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	opts := chaos.Options{Binary: exe, Duration: *duration, Ops: *ops, MaxDuration: *maxDuration, Workers: *workers,
		Seed: *seed, Control: string(control), WithoutDefect: *withoutDefect, Failpoints: true, FailpointRate: *rate, RequireAllFaults: *requireAll,
		Dir: *dir, Log: stderr, Failover: string(failover), FailoverUnsafeWindows: *unsafeWindows,
		AuditVerify: *auditVerify, AuditTamper: *auditTamper}
	if *history != "" {
		f, err := os.Create(*history)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.History = f
	}
	s, err := chaos.Run(ctx, opts)
	if err != nil {
		return err
	}
	for i, v := range s.Check.Violations {
		if i == 20 {
			fmt.Fprintf(stdout, "chaos: … and %d more violations (see the history)\n", len(s.Check.Violations)-i)
			break
		}
		fmt.Fprintf(stdout, "chaos: violation %s op=%s: %s\n", v.Kind, v.Op, v.Detail)
	}
	fmt.Fprintf(stdout, "chaos: seed=%d elapsed=%s effects=%d succeeded=%d failed=%d ready=%d rejected=%d awaiting=%d\n",
		s.Seed, s.Elapsed.Round(time.Second), s.Check.Effects, s.Check.Succeeded, s.Check.Failed, s.Check.Ready, s.Check.Rejected, s.Check.AwaitingOps)
	fmt.Fprintf(stdout, "chaos: injected %v\n", s.Injected)
	if s.HA != nil {
		fmt.Fprint(stdout, s.HA.Details())
	}
	if a := s.Audit; a != nil {
		for _, b := range a.First {
			fmt.Fprintln(stdout, "chaos: receipts BREAK", b.String())
		}
		if a.Tampered != "" && a.Breaks > 0 {
			fmt.Fprintf(stdout, "chaos: receipts control: %s was changed, and the verification reported %d break(s), as it must\n", a.Tampered, a.Breaks)
		}
	}
	fmt.Fprintln(stdout, s.StagedLine())
	fmt.Fprintln(stdout, s.Line())
	verdict := s.Err(*requireAll)
	if c := s.Control; c != nil && verdict == nil && s.WithoutDefect {
		fmt.Fprintf(stdout, "chaos: control run %s without its defect: the checker found no violation, as it must\n", c.Name)
	} else if c := s.Control; c != nil && verdict == nil {
		fmt.Fprintf(stdout, "chaos: control run %s: with %s, the checker detected %d %s violation(s), as it must\n",
			c.Name, c.What, s.Check.CountOf(c.Expect), c.Expect)
	}
	return verdict
}

// controlFlag is --control: a bare --control (as CI has always called it)
// names the default control, --control=NAME another one.
type controlFlag string

func (c *controlFlag) String() string { return string(*c) }

func (c *controlFlag) Set(v string) error {
	switch v {
	case "true":
		v = chaos.DefaultControl
	case "false":
		v = ""
	}
	if _, err := chaos.LookupControl(v); err != nil {
		return err
	}
	*c = controlFlag(v)
	return nil
}

// IsBoolFlag lets --control stand without a value.
func (c *controlFlag) IsBoolFlag() bool { return true }

// failoverFlag is --failover: alone (or =sync) synchronous replication,
// =async asynchronous replication, absent (or =false) a single PostgreSQL.
type failoverFlag string

func (f *failoverFlag) String() string { return string(*f) }

// IsBoolFlag lets --failover stand alone.
func (f *failoverFlag) IsBoolFlag() bool { return true }

func (f *failoverFlag) Set(v string) error {
	switch v {
	case "true", chaos.FailoverSync:
		*f = chaos.FailoverSync
	case chaos.FailoverAsync:
		*f = chaos.FailoverAsync
	case "false", "":
		*f = ""
	default:
		return fmt.Errorf("--failover=%s: want sync or async", v)
	}
	return nil
}
