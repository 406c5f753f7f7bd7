package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// newFlagSet returns the flag set of `opledger <name>`. Its -h/--help text
// says what the command does (about), how it is called (synopsis) and lists
// the flags with their types, so that a newcomer learns the command from the
// command itself.
func newFlagSet(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: opledger %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(about))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args into fs. A help request (-h, --help) prints the
// usage on stdout and returns flag.ErrHelp, which run turns into a
// successful exit; a bad flag prints the error and the usage on stderr.
// Every command takes flags only, so a stray argument is an error too.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = stdout.Write(buf.Bytes())
		return flag.ErrHelp
	}
	_, _ = stderr.Write(buf.Bytes())
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (this command takes flags only; see 'opledger %s -h')", fs.Name(), fs.Arg(0), fs.Name())
	}
	return nil
}

// secretEnv names the variables whose values must never be echoed, not
// even in an error about them.
var secretEnv = []string{"DATABASE_URL", "OPLEDGER_DOWNSTREAM_SECRET"}

// applyEnv sets every flag of fs that the command line left alone from its
// environment variable (envOf maps flag names to variable names), so that a
// flag beats its variable and the variable beats the built-in default. The
// variables go through the flag's own parser: a bad value is refused with
// the variable's name. Defaults shown by -h stay the built-in ones, so help
// never prints a secret taken from the environment.
func applyEnv(fs *flag.FlagSet, envOf map[string]string, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	names := make([]string, 0, len(envOf))
	for name := range envOf {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		env := envOf[name]
		v := getenv(env)
		if set[name] || v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			shown := fmt.Sprintf(" %q", v)
			if slices.Contains(secretEnv, env) {
				shown = ""
			}
			errs = append(errs, fmt.Errorf("%s:%s is not a valid --%s: %v", env, shown, name, err))
		}
	}
	return errors.Join(errs...)
}

// envFlags binds flags to environment variables for applyEnv.
type envFlags struct {
	fs    *flag.FlagSet
	envOf map[string]string
}

func newEnvFlags(fs *flag.FlagSet) *envFlags { return &envFlags{fs: fs, envOf: map[string]string{}} }

// bind records the flag's variable and appends its name to the usage text.
func (e *envFlags) bind(name, env, usage string) string {
	e.envOf[name] = env
	return usage + " (env " + env + ")"
}

func (e *envFlags) str(p *string, name, env, def, usage string) {
	e.fs.StringVar(p, name, def, e.bind(name, env, usage))
}

func (e *envFlags) boolean(p *bool, name, env string, def bool, usage string) {
	e.fs.BoolVar(p, name, def, e.bind(name, env, usage))
}

func (e *envFlags) integer(p *int, name, env string, def int, usage string) {
	e.fs.IntVar(p, name, def, e.bind(name, env, usage))
}

func (e *envFlags) float(p *float64, name, env string, def float64, usage string) {
	e.fs.Float64Var(p, name, def, e.bind(name, env, usage))
}

func (e *envFlags) duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	e.fs.DurationVar(p, name, def, e.bind(name, env, usage))
}

func (e *envFlags) value(v flag.Value, name, env, usage string) {
	e.fs.Var(v, name, e.bind(name, env, usage))
}

// apply is applyEnv for the bound flags.
func (e *envFlags) apply(getenv func(string) string) error { return applyEnv(e.fs, e.envOf, getenv) }

// hexSecret is a flag holding a secret given in hex. It never prints its
// value: -h shows no default, and errors do not quote it.
type hexSecret struct{ b *[]byte }

func (h hexSecret) String() string { return "" }

func (h hexSecret) Set(s string) error {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) < 16 {
		return errors.New("want at least 32 hex digits (16 bytes)")
	}
	*h.b = b
	return nil
}

// roleList is the --role flag of `keys create`: comma-separated roles,
// spaces allowed around them, the flag repeatable ("--role agent --role
// approver" is "--role 'agent, approver'").
type roleList []string

func (r *roleList) String() string { return strings.Join(*r, ",") }

func (r *roleList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !slices.Contains(*r, part) {
			*r = append(*r, part)
		}
	}
	return nil
}
