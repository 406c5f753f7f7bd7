package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/service"
	"github.com/opledger/opledger/store"
)

// defaultDevFakepay is the demo tools' processor URL when nothing else is
// given (examples/tools.yaml's default for OPLEDGER_FAKEPAY_URL).
const defaultDevFakepay = "127.0.0.1:7070"

// cmdDev runs everything a first-time user needs on one machine: a private
// PostgreSQL in --dir, the fake processor, a demo tenant with one key per
// role, and the service with the demo tools. It writes the keys and
// addresses to DIR/env so another shell can `. DIR/env`. One dev runs per
// directory at a time (devLock).
func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("dev", "[flags]", `
Starts everything a first try needs, in the foreground: a private PostgreSQL
(from the machine's PostgreSQL server binaries) kept in --dir, the fake
payment processor, a demo tenant with one API key per role (agent,
approver, operator) and the service with the demo tools
(examples/tools.yaml) pointing at that processor. It prints the keys and
addresses and writes them to DIR/env, for '. DIR/env' in another shell.
Ctrl-C stops everything.

One dev runs per --dir: a second one refuses while the first is alive (a
crashed one does not block). The database survives a restart (operations,
and every key issued: each start adds three new keys, the earlier ones stay
valid until revoked); the fake processor's charges and e-mails live in
memory and do not. Delete DIR to start afresh. The serve flags below apply
to the service inside dev.`)
	dir := fs.String("dir", ".opledger-dev", "`DIR` for the private PostgreSQL, the demo keys and the lock")
	pgPort := fs.Int("pg-port", 0, "PostgreSQL port on 127.0.0.1 (0: any free port)")
	fakepayAddr := fs.String("fakepay-listen", defaultDevFakepay, "fake processor address `HOST:PORT` (empty: do not start it)")
	tenant := fs.String("tenant", "demo", "the demo `tenant`")
	var cfg Config
	finish := bindConfig(fs, &cfg, getenv)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	if getenv("OPLEDGER_CONSOLE_LISTEN") == "" && !flagGiven(fs, "console-listen") {
		cfg.ConsoleListen = "127.0.0.1:8080"
	}
	logger := newLogger(stderr, cfg.LogLevel)
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	lock, err := lockDevDir(abs)
	if err != nil {
		return err
	}
	defer lock.Close()
	// The processor's port is taken before PostgreSQL starts: a clash (a
	// dev in another directory, say) fails at once, and port 0 works.
	fakepayURL := "http://" + defaultDevFakepay
	var fpLis net.Listener
	if *fakepayAddr != "" {
		if fpLis, err = net.Listen("tcp", *fakepayAddr); err != nil {
			return fmt.Errorf("fake processor: %w (choose another with --fakepay-listen HOST:PORT)", err)
		}
		defer fpLis.Close()
		fakepayURL = "http://" + fpLis.Addr().String()
	}
	if v := getenv("OPLEDGER_FAKEPAY_URL"); v != "" {
		fakepayURL = v
	}
	started := time.Now().UTC().Format(time.RFC3339)
	lock.update(devLockInfo{PID: os.Getpid(), GRPC: cfg.Listen, Fakepay: fakepayURL, Started: started})

	pgDir := filepath.Join(abs, "pg")
	fmt.Fprintln(stdout, "starting a private PostgreSQL in", pgDir, "...")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: pgDir, Port: *pgPort, Durable: true, Logger: logger})
	if errors.Is(err, pgcluster.ErrUnreachable) {
		// Running as root below a private home directory: PostgreSQL runs
		// as the postgres user, who cannot enter it. Keep the data in a
		// stable directory of its own instead, one per --dir.
		sum := sha256.Sum256([]byte(abs))
		pgDir = filepath.Join(os.TempDir(), "opledger-dev-"+hex.EncodeToString(sum[:6]))
		fmt.Fprintln(stdout, "the postgres user cannot enter", abs, "- keeping the database in", pgDir, "instead")
		cluster, err = pgcluster.Start(ctx, pgcluster.Options{Dir: pgDir, Port: *pgPort, Durable: true, Logger: logger})
	}
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = cluster.Stop(stopCtx)
	}()
	if err := cluster.CreateDatabase(ctx, "opledger", ""); err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	cfg.DatabaseURL = cluster.URL("opledger")
	if len(cfg.DownstreamSecret) == 0 {
		cfg.DownstreamSecret, err = devSecret(filepath.Join(abs, "downstream-secret"))
		if err != nil {
			return err
		}
	}
	if _, err := store.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{URL: cfg.DatabaseURL, MaxConns: 2})
	if err != nil {
		return err
	}
	// Each start issues new keys; the names say when, and a random tail
	// keeps two starts within one second apart.
	tail := make([]byte, 2)
	_, _ = rand.Read(tail)
	suffix := time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(tail)
	keys := map[string]string{}
	for _, role := range ledger.Roles {
		key, _, err := ledger.CreatePrincipal(ctx, st, *tenant, role+"-"+suffix, []string{role})
		if err != nil {
			st.Close()
			return err
		}
		keys[role] = key
	}
	st.Close()
	if fpLis != nil {
		fp := fakepay.New(fakepay.Options{Logger: logger.With("component", "fakepay")})
		go func() {
			if err := fp.Serve(ctx, fpLis); err != nil {
				logger.Error("fake processor stopped", "error", err)
			}
		}()
	}
	devenv := func(k string) string {
		if k == "OPLEDGER_FAKEPAY_URL" {
			return fakepayURL
		}
		return getenv(k)
	}
	envFile := filepath.Join(abs, "env")
	var readyErr error
	ready := func(r service.Ready) {
		addr := r.Addr
		// The env file is written once the service listens, with the
		// address it really bound: whoever sources it can connect at once.
		// FAKEPAY_URL is what the clients' examples and test suites read;
		// OPLEDGER_FAKEPAY_URL is what tools files expand.
		envText := fmt.Sprintf("export AGENT_KEY=%s\nexport APPROVER_KEY=%s\nexport OPERATOR_KEY=%s\nexport OPLEDGER_ADDR=%s\nexport DATABASE_URL=%s\nexport OPLEDGER_FAKEPAY_URL=%s\nexport FAKEPAY_URL=%s\n",
			keys[ledger.RoleAgent], keys[ledger.RoleApprover], keys[ledger.RoleOperator], addr, cfg.DatabaseURL, fakepayURL, fakepayURL)
		if readyErr = writeFileAtomic(envFile, []byte(envText), 0o600); readyErr != nil {
			fmt.Fprintln(stderr, "opledger dev: could not write", envFile+":", readyErr)
		}
		lock.update(devLockInfo{PID: os.Getpid(), GRPC: addr, Fakepay: fakepayURL, Database: cfg.DatabaseURL, Started: started})
		fmt.Fprintf(stdout, `
opledger dev is ready
  gRPC          %s (reflection on, plaintext)
  console       %s
  fake processor %s
  database      %s
  tenant        %s
  agent key     %s
  approver key  %s
  operator key  %s

In another shell:
  . %s
  grpcurl -plaintext %s list
  grpcurl -plaintext -H "authorization: Bearer $AGENT_KEY" -H "idempotency-key: invoice-2048" \
    -d '{"tool":"pay_invoice","args":{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}}' \
    %s opledger.v1.LedgerService/Prepare

Logs follow as JSON on standard error. Ctrl-C stops everything.
`, addr, orOff(r.ConsoleURL), fakepayURL, cfg.DatabaseURL, *tenant, keys[ledger.RoleAgent], keys[ledger.RoleApprover], keys[ledger.RoleOperator],
			relOrAbs(envFile), addr, addr)
	}
	cfg.Migrate = false
	err = serve(ctx, cfg, logger, devenv, ready)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return errors.Join(err, readyErr)
}

func relOrAbs(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return "./" + r
	}
	return p
}

// devSecret keeps one random downstream secret per dev directory, so
// downstream keys stay stable across restarts of `opledger dev`.
func devSecret(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		return hex.DecodeString(strings.TrimSpace(string(b)))
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return secret, os.WriteFile(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600)
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) (given bool) {
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s + "/ (sign in with the approver or operator key)"
}
