package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/opledger/opledger/internal/probe"
	"github.com/opledger/opledger/tool"
)

// Exit statuses of `opledger probe` (docs/tools.md, "Probing a downstream").
const (
	probeContradicted = 1 // some check is CONTRADICTED
	probeNoVerdict    = 2 // bad input, no --yes, or the downstream down: no verdict at all
)

// cmdProbe checks a tool's declarations against its real downstream: it
// sends real requests (so it wants --yes), through the product's HTTP
// executor, under keys of its own.
func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("probe", "--tools FILE --tool NAME --args FILE --yes [flags]", `
Checks what the tools file declares about one tool's downstream
(dedupes_keys, lookup_url, lookup_consistent, the lookup status values,
definitive_statuses, key_retention) against the downstream itself. It sends
real requests and makes real effects, with --args, under fresh keys of its
own (probe-<run>-N, never a key the ledger derives): run it against a
sandbox or test mode, before a tool version goes live and in CI. It prints
one line per check: ok, CONTRADICTED with the evidence, not verifiable
here, or not declared; then how many effects it made and their references.
Exit status: 0 nothing contradicted, 1 something CONTRADICTED, 2 no verdict
(bad input, no --yes, or a downstream that is down).`)
	e := newEnvFlags(fs)
	var toolsFile, name, version, argsFile, invalidFile string
	var yes, asJSON bool
	opts := probe.Options{}
	e.str(&toolsFile, "tools", "OPLEDGER_TOOLS", "", "the tools `FILE` (required)")
	fs.StringVar(&name, "tool", "", "the tool `NAME` to probe (required)")
	fs.StringVar(&version, "version", "", "the tool `VERSION` (default: the current one, declared last, as a Prepare without tool_version)")
	fs.StringVar(&argsFile, "args", "", "`FILE` holding a JSON object of args the downstream accepts and the args_schema allows (required); every effect is made with it")
	fs.StringVar(&invalidFile, "invalid-args", "", "`FILE` holding a JSON object the downstream must refuse (checks definitive_statuses)")
	fs.BoolVar(&yes, "yes", false, "send real requests: the probe makes real effects at the downstream (required)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.IntVar(&opts.Lookups, "lookups", probe.DefaultLookups, "lookups sent back to back right after an effect")
	fs.IntVar(&opts.Twins, "twins", probe.DefaultTwins, "requests with one key started together")
	fs.DurationVar(&opts.LookupWait, "lookup-wait", probe.DefaultLookupWait, "how long a lookup that has not found an effect is retried")
	fs.DurationVar(&opts.RetentionWait, "retention-wait", probe.DefaultRetentionWait, "check a key_retention no longer than this by waiting for 90% of it (0: the default; negative: never)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: probeNoVerdict, err: err}
	}
	noVerdict := func(err error) error {
		if asJSON {
			_ = writeJSON(stdout, &probe.Report{Error: err.Error()})
		}
		return &exitError{code: probeNoVerdict, err: fmt.Errorf("probe: %w", err)}
	}
	if err := e.apply(getenv); err != nil {
		return noVerdict(err)
	}
	if toolsFile == "" || name == "" || argsFile == "" {
		return noVerdict(errors.New("--tools, --tool and --args are required"))
	}
	reg, err := tool.Load(toolsFile, getenv)
	if err != nil {
		return noVerdict(err)
	}
	t, err := reg.Lookup(name, version)
	switch {
	case errors.Is(err, tool.ErrUnknownTool):
		return noVerdict(fmt.Errorf("%w (declared: %s)", err, reg.Names(20)))
	case errors.Is(err, tool.ErrUnknownVersion):
		return noVerdict(fmt.Errorf("%w (declared: %s)", err, reg.Versions(name, 20)))
	case err != nil:
		return noVerdict(err)
	}
	if opts.Args, err = os.ReadFile(argsFile); err != nil {
		return noVerdict(fmt.Errorf("--args: %w", err))
	}
	if invalidFile != "" {
		if opts.InvalidArgs, err = os.ReadFile(invalidFile); err != nil {
			return noVerdict(fmt.Errorf("--invalid-args: %w", err))
		}
	}
	opts.Tool = t
	if !yes {
		return noVerdict(fmt.Errorf("refusing to start without --yes: the probe sends real requests to POST %s and makes real effects there "+
			"(at least two, with --args); run it against a sandbox or test mode", probe.ShownURL(t.Executor.URL)))
	}
	rep, err := probe.Run(ctx, opts)
	if rep == nil {
		return noVerdict(err)
	}
	if asJSON {
		if werr := writeJSON(stdout, rep); werr != nil {
			return werr
		}
	} else {
		rep.WriteText(stdout)
	}
	if err != nil {
		return &exitError{code: probeNoVerdict, err: fmt.Errorf("probe: no verdict: %w", err)}
	}
	if n := rep.Count(probe.Contradicted); n > 0 {
		return &exitError{code: probeContradicted, err: fmt.Errorf("probe: %d checks CONTRADICTED: the tools file declares what %s version %s's downstream does not do", n, t.Name, t.Version)}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
