package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/store"
)

const auditUsage = `usage: opledger audit <keygen|export|verify> [flags]

The receipts (docs/audit.md): every event of an operation is hash-chained to
the one before it, and the server signs checkpoints of the chains' heads.

  audit keygen  make an Ed25519 checkpoint signing key: --out FILE (public key in FILE.pub)
  audit export  a tenant's operations, events, proofs and checkpoints as JSON Lines:
                --tenant T [--since TIME] [--until TIME] --out FILE
  audit verify  check the live tables (--database, DATABASE_URL) or an export
                offline (FILE --public-key FILE); exits non-zero on any break

Run 'opledger audit <command> -h' for its flags.
`

func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "keygen":
		return cmdAuditKeygen(args[1:], stdout, stderr)
	case "verify":
		return cmdAuditVerify(ctx, args[1:], stdout, stderr, getenv)
	case "export":
		return cmdAuditExport(ctx, args[1:], stdout, stderr, getenv)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, auditUsage)
		return flag.ErrHelp
	}
	fmt.Fprint(stderr, auditUsage)
	if sub == "" {
		return errors.New("audit: no subcommand given")
	}
	return fmt.Errorf("audit: unknown subcommand %q", sub)
}

// auditPage is how many operations a verification or an export reads per
// round trip.
const auditPage = 500

func cmdAuditVerify(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("audit verify", "--database | FILE --public-key FILE", `
Checks the receipts. With --database, the live tables of DATABASE_URL: every
operation's hash chain (each event's hash recomputed from its fields and the
hash before it), its events numbered 1..n with the head on the operation,
and its decisive fields (arguments, fingerprint, state, approvals, external
reference, result, policy) against the events that set them. With FILE, an
export (opledger audit export) offline, with nothing but the file and the
checkpoint signer's public key (--public-key FILE.pub). Prints what it
checked and one line per break, naming the operation and the event; exits
1 on any break.`)
	e := newEnvFlags(fs)
	var url, publicKey string
	var database bool
	e.str(&url, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	fs.BoolVar(&database, "database", false, "check the live tables of DATABASE_URL")
	fs.StringVar(&publicKey, "public-key", "", "the checkpoint signer's public key `FILE` (FILE.pub of audit keygen), for an export")
	// FILE may come before the flags: opledger audit verify FILE --public-key K.
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := parseFlagsArgs(fs, args, stdout, stderr, &file); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	switch {
	case database && file != "":
		return errors.New("audit verify: give --database or an export FILE, not both")
	case database:
		return verifyDatabase(ctx, url, stdout)
	case file != "":
		return verifyExportFile(file, publicKey, stdout)
	}
	return errors.New("audit verify: give --database (DATABASE_URL) or an export FILE with --public-key FILE")
}

// parseFlagsArgs is parseFlags for a command that takes one optional
// argument after its flags too (stored in *arg unless already set).
func parseFlagsArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, arg *string) error {
	// Flags after the argument: flag stops at the first non-flag.
	for i, a := range args {
		if !strings.HasPrefix(a, "-") && (i == 0 || !needsValue(fs, args[i-1])) {
			if *arg != "" {
				return fmt.Errorf("%s: unexpected argument %q", fs.Name(), a)
			}
			*arg = a
			args = append(append([]string(nil), args[:i]...), args[i+1:]...)
			break
		}
	}
	return parseFlags(fs, args, stdout, stderr)
}

// needsValue reports whether a (a flag on the command line) takes the next
// argument as its value.
func needsValue(fs *flag.FlagSet, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}

// breaksError is verify's exit: 1, with how many breaks it found.
func breaksError(n int) error {
	return &exitError{code: 1, err: fmt.Errorf("audit verify: %d break(s)", n)}
}

func verifyDatabase(ctx context.Context, url string, stdout io.Writer) error {
	st, err := keysStore(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	var sum verifySummary
	err = st.AuditVerifyAll(ctx, auditPage, func(r store.AuditRecord, breaks []audit.Break) {
		sum.add(r.Operation, r.Events, breaks, stdout)
	})
	if err != nil {
		return err
	}
	sum.print(stdout, "database")
	if sum.breaks > 0 {
		return breaksError(sum.breaks)
	}
	return nil
}

// verifySummary counts what a verification checked.
type verifySummary struct {
	operations, events, hashed, partial, breaks int
}

func (s *verifySummary) add(op audit.Operation, events []audit.Event, breaks []audit.Break, out io.Writer) {
	s.operations++
	s.events += len(events)
	for i, e := range events {
		if e.Hash != nil {
			s.hashed++
		} else if i == 0 {
			s.partial++
		}
	}
	for _, b := range breaks {
		fmt.Fprintln(out, "BREAK", b.String())
	}
	s.breaks += len(breaks)
}

func (s *verifySummary) print(out io.Writer, what string) {
	fmt.Fprintf(out, "%s: checked %d operations, %d events (%d hash-chained; %d operations whose chain starts after events written before the receipts): %d breaks\n",
		what, s.operations, s.events, s.hashed, s.partial, s.breaks)
}
