// Package pgtest gives Go tests fresh, migrated PostgreSQL databases.
//
// A test binary calls Main from its TestMain. The first NewDatabase then either uses the server
// named by the environment variable DATABASE_URL (an admin URL, e.g. in CI) or starts one private
// cluster for the whole binary in a short directory under /tmp on a free port. It creates a
// template database, runs Options.Migrate on it once, and every NewDatabase clones the template,
// which is much faster than migrating each database. Main stops and removes the private cluster.
//
// Database names carry the test binary's pid and a random token, so test binaries running in
// parallel (go test ./...) never clash, even on one shared server.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opledger/opledger/store"

	"github.com/opledger/opledger/proof/pgcluster"
)

// Options configures the databases of one test binary.
type Options struct {
	// Migrate brings the template database at url to the schema the tests expect. It runs once per
	// test binary and must close every connection it opened before returning. nil leaves the
	// databases empty.
	Migrate func(ctx context.Context, url string) error
}

// EnvDatabaseURL names the environment variable that points the tests at an existing server
// instead of a private cluster.
const EnvDatabaseURL = "DATABASE_URL"

// dirPrefix marks the private clusters' directories under /tmp, so a later test binary can find
// and remove those of binaries that died without cleaning up.
const dirPrefix = "pgtest-"

// ownerFile, in a private cluster's directory, holds the pid of the test binary that owns it.
const ownerFile = "owner.pid"

// setupTimeout bounds starting the cluster and migrating the template.
const setupTimeout = 5 * time.Minute

// suite is the state of one test binary: tests cannot be handed a value, so it is package state,
// set up by Main and lazily by the first NewDatabase.
type suite struct {
	mainCalled atomic.Bool
	opts       Options

	once     sync.Once
	err      error
	adminURL string
	cluster  *pgcluster.Cluster
	dir      string
	tmpl     string
	token    string

	cloneMu sync.Mutex // CREATE DATABASE … TEMPLATE fails while another clone reads the template
	seq     atomic.Int64

	shutdownOnce sync.Once
}

var current suite

// Main runs the tests of a test binary and exits with their code; call it from TestMain. It stops
// and removes the private cluster, if one was started, also when the binary is interrupted
// (SIGINT, SIGTERM).
func Main(m *testing.M, opts Options) {
	current.opts = opts
	current.mainCalled.Store(true)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "pgtest: %v: stopping the test cluster\n", sig)
		current.shutdown()
		os.Exit(1)
	}()

	code := m.Run()
	signal.Stop(sigs)
	if err := current.shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// NewDatabase returns the URL of a fresh database with Options.Migrate applied, private to the
// calling test and dropped (WITH (FORCE)) when it ends. It is safe to call from parallel tests.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, (*suite).clone)
}

// NewEmptyDatabase returns the URL of a fresh database without any
// migration, for tests of what runs before one; like NewDatabase, it is
// private to the calling test and dropped when it ends.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, func(s *suite, ctx context.Context, name string) error {
		return admin(ctx, s.adminURL, "CREATE DATABASE "+ident(name)+" TEMPLATE template0")
	})
}

func newDatabase(t testing.TB, create func(s *suite, ctx context.Context, name string) error) string {
	t.Helper()
	s := &current
	if err := s.setup(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := fmt.Sprintf("opledger_test_%d_%s_%d", os.Getpid(), s.token, s.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := create(s, ctx, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin(ctx, s.adminURL, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop test database: %v", err)
		}
	})
	return withDatabase(s.adminURL, name)
}

// Cluster returns the private cluster of this test binary, for tests that stop, crash or restart
// the server. Such tests affect every test of the binary that uses the server at the same time, so
// they must not run in parallel with those; NewCluster gives a test a server of its own. Cluster
// skips the test when DATABASE_URL is set: there is no cluster to control then.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if os.Getenv(EnvDatabaseURL) != "" {
		t.Skipf("pgtest: %s is set, so there is no private cluster to control", EnvDatabaseURL)
	}
	if err := current.setup(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return current.cluster
}

// NewCluster starts a private cluster for the calling test alone (nothing migrated in it), stopped
// and removed when the test ends. It costs an initdb (about 1.5 s), so prefer NewDatabase; use it
// for tests that crash the server while other tests run. It skips the test when DATABASE_URL is set
// and there are no PostgreSQL server binaries on the machine.
func NewCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if _, err := pgcluster.FindBinDir(); err != nil && os.Getenv(EnvDatabaseURL) != "" {
		t.Skipf("pgtest: %v", err)
	}
	dir, err := makeDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: clusterSettings()})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	return c
}

// NewSkewedDatabase returns the URL of a fresh database with Options.Migrate applied, on a
// private cluster whose clock runs offset from the machine's (pgcluster's FakeClock, which needs
// Debian's faketime package; the test skips without it unless OPLEDGER_REQUIRE_FAKETIME is set,
// as CI sets it). It is for tests of time rules that must be judged on the database's clock.
func NewSkewedDatabase(t testing.TB, offset time.Duration) (url string, c *pgcluster.Cluster) {
	t.Helper()
	if _, err := os.Stat(pgcluster.LibFaketime); err != nil {
		if os.Getenv("OPLEDGER_REQUIRE_FAKETIME") != "" {
			t.Fatalf("pgtest: libfaketime is required: %v", err)
		}
		t.Skipf("pgtest: no libfaketime (apt-get install faketime): %v", err)
	}
	return newPrivateDatabase(t, pgcluster.Options{FakeClock: true, ClockOffset: offset})
}

// NewSteppedClockDatabase is NewSkewedDatabase (offset 0) for tests that step the database's
// clock between two statements (lease and approval expiry as steps, without sleeps): every
// clock reading of the server re-reads the offset (pgcluster's ClockNoCache), so a
// SetClockOffset is in force in every backend as soon as it returns, at the price of a file read
// per clock reading.
func NewSteppedClockDatabase(t testing.TB) (url string, c *pgcluster.Cluster) {
	t.Helper()
	if _, err := os.Stat(pgcluster.LibFaketime); err != nil {
		if os.Getenv("OPLEDGER_REQUIRE_FAKETIME") != "" {
			t.Fatalf("pgtest: libfaketime is required: %v", err)
		}
		t.Skipf("pgtest: no libfaketime (apt-get install faketime): %v", err)
	}
	return newPrivateDatabase(t, pgcluster.Options{FakeClock: true, ClockNoCache: true})
}

// NewPrivateDatabase returns the URL of a migrated database on a private cluster of the calling
// test, which it may stop, crash and restart without disturbing other tests.
func NewPrivateDatabase(t testing.TB) (url string, c *pgcluster.Cluster) {
	t.Helper()
	if _, err := pgcluster.FindBinDir(); err != nil && os.Getenv(EnvDatabaseURL) != "" {
		t.Skipf("pgtest: %v", err)
	}
	return newPrivateDatabase(t, pgcluster.Options{})
}

func newPrivateDatabase(t testing.TB, opts pgcluster.Options) (url string, c *pgcluster.Cluster) {
	t.Helper()
	dir, err := makeDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	opts.Dir, opts.Settings = dir, clusterSettings()
	c, err = pgcluster.Start(ctx, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	url = c.URL("postgres")
	if m := current.opts.Migrate; m != nil {
		if err := m(ctx, url); err != nil {
			t.Fatalf("pgtest: migrate: %v", err)
		}
	}
	return url, c
}

func (s *suite) setup() error {
	if !s.mainCalled.Load() {
		return errors.New("call pgtest.Main(m, opts) from TestMain: it runs the migrations and removes the test cluster")
	}
	s.once.Do(func() { s.err = s.init() })
	return s.err
}

func (s *suite) init() error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var b [3]byte
	_, _ = rand.Read(b[:])
	s.token = hex.EncodeToString(b[:])

	if u := os.Getenv(EnvDatabaseURL); u != "" {
		s.adminURL = u
	} else {
		reapOrphans()
		dir, err := makeDir()
		if err != nil {
			return err
		}
		s.dir = dir
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: clusterSettings()})
		if err != nil {
			return err
		}
		s.cluster = c
		s.adminURL = c.URL("postgres")
	}

	s.tmpl = fmt.Sprintf("opledger_tmpl_%d_%s", os.Getpid(), s.token)
	if err := admin(ctx, s.adminURL, "CREATE DATABASE "+ident(s.tmpl)); err != nil {
		return err
	}
	if s.opts.Migrate != nil {
		if err := s.opts.Migrate(ctx, withDatabase(s.adminURL, s.tmpl)); err != nil {
			return fmt.Errorf("migrate template database: %w", err)
		}
	}
	// A connection left open by Migrate (a pool not closed) would make every clone fail, so forbid
	// new connections to the template and end the ones still there.
	return admin(ctx, s.adminURL,
		"ALTER DATABASE "+ident(s.tmpl)+" WITH ALLOW_CONNECTIONS false",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+s.tmpl+"' AND pid <> pg_backend_pid()")
}

func (s *suite) clone(ctx context.Context, name string) error {
	s.cloneMu.Lock()
	defer s.cloneMu.Unlock()
	sql := "CREATE DATABASE " + ident(name) + " TEMPLATE " + ident(s.tmpl)
	for attempt := 1; ; attempt++ {
		err := admin(ctx, s.adminURL, sql)
		// An autovacuum worker may briefly be connected to the template; PostgreSQL then reports
		// object_in_use.
		if err == nil || !errors.Is(err, store.ErrObjectInUse) || attempt == 10 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// shutdown removes what this binary left on the server: the private cluster entirely, or the
// template database on a DATABASE_URL server.
func (s *suite) shutdown() error {
	var err error
	s.shutdownOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if s.cluster != nil {
			err = s.cluster.Stop(ctx)
		} else if s.tmpl != "" && s.adminURL != "" {
			err = admin(ctx, s.adminURL, "DROP DATABASE IF EXISTS "+ident(s.tmpl)+" WITH (FORCE)")
		}
		if s.dir != "" && err == nil {
			err = os.RemoveAll(s.dir)
		}
	})
	return err
}

// clusterSettings leaves room for many parallel tests, each with its own pool.
func clusterSettings() map[string]string {
	return map[string]string{"max_connections": "300"}
}

// makeDir creates a private cluster's directory: short, because the Unix socket path must fit in
// 107 bytes, and reachable by the postgres user, which runs the server when we are root.
func makeDir() (string, error) {
	dir, err := os.MkdirTemp("/tmp", dirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// reapOrphans removes the clusters of test binaries that died without running Main's cleanup
// (killed, or stopped by go test's -timeout), so that they do not pile up across runs. A cluster is
// an orphan when its owner's pid is gone; its postmaster is shut down immediately (SIGQUIT).
func reapOrphans() {
	dirs, _ := filepath.Glob(filepath.Join("/tmp", dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or being created right now
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner <= 0 || !errors.Is(syscall.Kill(owner, 0), syscall.ESRCH) {
			continue // owner alive (or unknown): not an orphan
		}
		if pid := postmasterPID(filepath.Join(dir, "data")); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil && isPostgres(pid); i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// postmasterPID returns the pid of the running postmaster of dataDir, or 0.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 || !isPostgres(pid) {
		return 0
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil || cwd != dataDir {
		return 0
	}
	return pid
}

func isPostgres(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "postgres"
}

// admin runs statements, in order, on the server of adminURL.
func admin(ctx context.Context, adminURL string, sqls ...string) error {
	return store.AdminExec(ctx, adminURL, sqls...)
}

func ident(name string) string { return store.QuoteIdent(name) }

// withDatabase returns connString pointing at database name instead, for both the URL and the
// keyword/value forms of connection strings.
func withDatabase(connString, name string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err == nil {
			u.Path = "/" + name
			u.RawPath = ""
			return u.String()
		}
	}
	// In keyword/value strings a later dbname overrides an earlier one.
	return connString + " dbname=" + name
}
