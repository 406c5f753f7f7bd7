// Package pgcluster starts and controls a private PostgreSQL cluster built from the machine's
// PostgreSQL server binaries. Tests, `opledger dev` and the chaos suite use it to get a throwaway
// server that listens on 127.0.0.1 only, on a port of their choosing, and that they can stop, crash
// and restart at will.
//
// PostgreSQL refuses to run as root, so when the calling process is root every server binary runs as
// the "postgres" OS user and the cluster's directory tree is handed over to that user.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opledger/opledger/store"
)

// ErrUnreachable means the cluster directory lies below a directory the
// postgres user may not enter (typically a home directory of mode 0700,
// when running as root).
var ErrUnreachable = errors.New("pgcluster: directory unreachable for the postgres user")

// Options configures Start.
type Options struct {
	// Dir holds everything of the cluster: Dir/data (the data directory), Dir/sock (the Unix
	// socket directory) and Dir/postgres.log (the server log). It is created if missing and
	// reused, data included, if it already holds a cluster. Keep it short: the Unix socket path
	// must fit in 107 bytes (beyond that the server listens on TCP only). When the process is root,
	// Dir and pgcluster's entries in it are handed to the postgres user, and every parent of Dir must
	// be traversable by that user (not under /root, say).
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// BinDir holds initdb, pg_ctl and postgres; "" means `pg_config --bindir`, or else the newest
	// /usr/lib/postgresql/*/bin.
	BinDir string
	// Durable keeps PostgreSQL's crash-safety defaults. When false (tests) fsync and
	// full_page_writes are off: much faster, and a crash of the server (Crash, SIGKILL) still loses
	// no committed transaction, only a crash of the machine could. synchronous_commit stays on even
	// then: off, a server crash would lose the last commits acknowledged to clients, which would
	// make crash tests lie, and with fsync off it costs next to nothing anyway.
	Durable bool
	// Settings are extra postgresql.conf settings, such as max_connections; they win over the
	// settings pgcluster writes itself.
	Settings map[string]string
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// FakeClock runs the server under libfaketime (Debian's package faketime), so that its clock,
	// and so now(), can be offset from the machine's with SetClockOffset: tests of time rules
	// judged on the database's clock, and the chaos suite's clock skew. A Go program does not read
	// time through libc, so the database is the part whose clock a test can skew.
	FakeClock bool
	// ClockOffset is the initial offset of a FakeClock server's clock.
	ClockOffset time.Duration
	// ClockNoCache makes a FakeClock server's processes re-read the offset on every clock reading
	// (libfaketime's FAKETIME_NO_CACHE) instead of at most once a second, so that SetClockOffset
	// takes effect at once in every backend: tests that step the database's clock between two
	// statements need it. It costs a read of the offset file per clock reading (several per
	// statement), which is why it is off by default.
	ClockNoCache bool
}

// LibFaketime is where Debian's faketime package puts the preload library.
const LibFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// Cluster is a PostgreSQL cluster started by Start. Its methods are safe for concurrent use.
type Cluster struct {
	dir      string
	dataDir  string
	sockDir  string
	logPath  string
	binDir   string
	durable  bool
	settings map[string]string
	cred     *syscall.Credential // nil: run the binaries as ourselves
	log      *slog.Logger

	mu   sync.Mutex // serialises Stop, Crash and Restart
	port int        // fixed once Start returns

	clockFile    string // the libfaketime offset file of a FakeClock server; "" otherwise
	clockNoCache bool   // re-read clockFile on every clock reading
}

const (
	confFile    = "pgcluster.conf"
	includeLine = "include_if_exists = '" + confFile + "'\t# added by pgcluster"
	// maxSocketPath is the size of sun_path on Linux minus its terminating NUL.
	maxSocketPath = 107
	// startTimeout bounds pg_ctl's wait; crash recovery of a big dev database can take a while.
	startTimeout = 120
	stopTimeout  = 60
)

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Start initialises the cluster in opts.Dir if needed (initdb with trust authentication for local
// and 127.0.0.1 connections, superuser postgres, UTF8, locale C) and starts it, waiting until it
// accepts connections. A postmaster left running on the same data directory by an earlier process
// is stopped first, and a stale postmaster.pid is removed. When start fails the error includes the
// tail of the server log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgcluster: Options.Dir is required")
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("pgcluster: invalid port %d", opts.Port)
	}
	for k, v := range opts.Settings {
		if !settingName.MatchString(k) {
			return nil, fmt.Errorf("pgcluster: invalid setting name %q", k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return nil, fmt.Errorf("pgcluster: setting %s: value contains a line break or NUL", k)
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("pgcluster: %s not found in %s: %w", name, binDir, err)
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		dir:      dir,
		dataDir:  filepath.Join(dir, "data"),
		sockDir:  filepath.Join(dir, "sock"),
		logPath:  filepath.Join(dir, "postgres.log"),
		binDir:   binDir,
		durable:  opts.Durable,
		settings: maps.Clone(opts.Settings),
		log:      logger.With("component", "pgcluster", "dir", dir),
	}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	if err := c.prepareDirs(); err != nil {
		return nil, err
	}
	if opts.FakeClock {
		if _, err := os.Stat(LibFaketime); err != nil {
			return nil, fmt.Errorf("pgcluster: a fake clock needs libfaketime (apt-get install faketime): %w", err)
		}
		c.clockFile = filepath.Join(dir, "faketime")
		c.clockNoCache = opts.ClockNoCache
		if err := c.SetClockOffset(opts.ClockOffset); err != nil {
			return nil, err
		}
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if err := c.clearStale(ctx); err != nil {
		return nil, err
	}

	// A port we picked may be grabbed by someone else before the postmaster binds it (several test
	// binaries start clusters at once), so try a few fresh ones; a port the caller chose is theirs
	// to fix.
	attempts := 1
	if opts.Port == 0 {
		attempts = 5
	}
	for i := 0; ; i++ {
		port := opts.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		c.port = port
		err = c.start(ctx)
		if err == nil {
			return c, nil
		}
		if i+1 >= attempts || !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			return nil, err
		}
		c.log.Info("port taken, trying another", "port", port)
	}
}

// SetClockOffset moves the clock of a server started with FakeClock to the machine's clock plus d
// (negative: behind). Its processes pick the change up within about a second, or at their next
// clock reading with ClockNoCache.
func (c *Cluster) SetClockOffset(d time.Duration) error {
	if c.clockFile == "" {
		return errors.New("pgcluster: SetClockOffset needs a cluster started with FakeClock")
	}
	spec := fmt.Sprintf("%+.6f", d.Seconds())
	tmp := c.clockFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(spec+"\n"), 0o644); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.Rename(tmp, c.clockFile); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// FindBinDir returns the directory of the PostgreSQL server binaries: `pg_config --bindir` when
// pg_config is on PATH, else the newest /usr/lib/postgresql/*/bin (Debian's layout, which keeps
// the server binaries off PATH).
func FindBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(p)), 64)
		return v
	}
	sort.Slice(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	for _, m := range matches {
		if _, err := os.Stat(filepath.Join(m, "pg_ctl")); err == nil {
			return m, nil
		}
	}
	return "", errors.New("pgcluster: no PostgreSQL server binaries found (no pg_config on PATH, nothing in /usr/lib/postgresql/*/bin); install the postgresql package")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL returns the connection URL of database on this cluster, as the superuser postgres.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port(), url.PathEscape(database))
}

// SocketURL returns the connection URL of database over the cluster's Unix
// socket, as the superuser postgres, and false when the cluster has no
// socket (its directory's path too long for one).
func (c *Cluster) SocketURL(database string) (string, bool) {
	if !c.hasSocket() {
		return "", false
	}
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable",
		url.PathEscape(database), url.QueryEscape(c.sockDir), c.Port()), true
}

// hasSocket reports whether the postmaster can bind its Unix socket: a path
// longer than sun_path cannot be bound, and TCP alone will do.
func (c *Cluster) hasSocket() bool {
	return len(filepath.Join(c.sockDir, ".s.PGSQL."+strconv.Itoa(c.port)+".lock")) <= maxSocketPath
}

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's directory (Options.Dir made absolute).
func (c *Cluster) Dir() string { return c.dir }

// DataDir returns the PostgreSQL data directory, Dir/data.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogPath returns the server log file, Dir/postgres.log.
func (c *Cluster) LogPath() string { return c.logPath }

// PID returns the process id of the running postmaster, read from postmaster.pid; the chaos suite
// uses it to kill the server harder than Crash does.
func (c *Cluster) PID() (int, error) {
	pid, err := readPID(c.dataDir)
	if err != nil {
		return 0, fmt.Errorf("pgcluster: server not running: %w", err)
	}
	return pid, nil
}

// Stop shuts the server down cleanly (pg_ctl stop -m fast: clients are disconnected, a checkpoint
// is written) and waits for it to exit. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop(ctx, "fast")
}

// Crash stops the server the way a crash would (pg_ctl stop -m immediate: no checkpoint, the next
// start runs crash recovery) and waits for it to exit.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop(ctx, "immediate")
}

// Restart starts the server again on the same port and directory, after Stop or Crash; a running
// server is stopped (fast) first.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(ctx, "fast"); err != nil {
		return err
	}
	if err := c.clearStale(ctx); err != nil {
		return err
	}
	return c.start(ctx)
}

// CreateDatabase creates database name, copied from template unless template is "" (then the
// server's default, template1).
func (c *Cluster) CreateDatabase(ctx context.Context, name, template string) error {
	sql := "CREATE DATABASE " + store.QuoteIdent(name)
	if template != "" {
		sql += " TEMPLATE " + store.QuoteIdent(template)
	}
	return c.admin(ctx, sql)
}

// DropDatabase drops database name if it exists, disconnecting its clients (WITH (FORCE)).
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return c.admin(ctx, "DROP DATABASE IF EXISTS "+store.QuoteIdent(name)+" WITH (FORCE)")
}

func (c *Cluster) admin(ctx context.Context, sql string) error {
	if err := store.AdminExec(ctx, c.URL("postgres"), sql); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, PostgreSQL must run as the postgres user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: postgres gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDirs creates Dir and Dir/sock and, when we are root, hands them to the postgres user.
func (c *Cluster) prepareDirs() error {
	if c.cred != nil {
		if err := c.checkReachable(); err != nil {
			return err
		}
	}
	// Parents we create must stay traversable by the postgres user; Dir itself is private.
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o755); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.Mkdir(c.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.MkdirAll(c.sockDir, 0o700); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	f.Close()
	if c.cred == nil {
		return nil
	}
	// Only our own entries are chowned recursively: Dir may be a directory the user picked, whose
	// other contents are none of our business.
	if err := c.chown(c.dir); err != nil {
		return err
	}
	for _, p := range []string{c.dataDir, c.sockDir, c.logPath} {
		err := filepath.WalkDir(p, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return c.chown(path)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgcluster: hand %s to the postgres user: %w", p, err)
		}
	}
	return nil
}

func (c *Cluster) chown(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == c.cred.Uid && st.Gid == c.cred.Gid {
		return nil
	}
	return os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid))
}

// checkReachable reports a clear error when the postgres user cannot traverse a parent of Dir
// (e.g. Dir under /root), which would otherwise surface as an obscure initdb failure.
func (c *Cluster) checkReachable() error {
	for p := filepath.Dir(c.dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != filepath.Dir(p) {
			continue // created below, traversable
		}
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		reachable := !ok || mode&0o001 != 0 ||
			(st.Uid == c.cred.Uid && mode&0o100 != 0) ||
			(st.Gid == c.cred.Gid && mode&0o010 != 0)
		if !reachable {
			return fmt.Errorf("%w: the postgres user cannot reach %s because %s is mode %v; choose a Dir elsewhere (e.g. under /tmp or /var/tmp) or run chmod o+x %s", ErrUnreachable, c.dir, p, mode, p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// initdb creates the data directory unless it already holds a cluster. It initialises a sibling
// directory and renames it into place, so that an interrupted initdb never leaves a half-made
// data directory that later starts would mistake for a real one.
func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		c.log.Debug("reusing existing data directory")
		return nil
	}
	if entries, err := os.ReadDir(c.dataDir); err == nil {
		if len(entries) > 0 {
			return fmt.Errorf("pgcluster: %s exists, is not empty and has no PG_VERSION; remove it or choose another Dir", c.dataDir)
		}
		if err := os.Remove(c.dataDir); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	tmp := c.dataDir + ".initdb"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	args := []string{"-D", tmp, "-U", "postgres", "-E", "UTF8", "--locale=C",
		"--auth-local=trust", "--auth-host=trust", "--no-instructions"}
	if !c.durable {
		args = append(args, "--no-sync")
	}
	begin := time.Now()
	if out, err := c.run(ctx, "initdb", args...); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, strings.TrimSpace(out))
	}
	if err := os.Rename(tmp, c.dataDir); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	// pg_ctl -D and the config include are resolved against the data directory's final path.
	if err := c.appendInclude(); err != nil {
		return err
	}
	c.log.Info("initialised data directory", "elapsed", time.Since(begin).Round(time.Millisecond))
	return nil
}

func (c *Cluster) appendInclude() error {
	path := filepath.Join(c.dataDir, "postgresql.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if bytes.Contains(b, []byte(includeLine)) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if _, err := fmt.Fprintf(f, "\n%s\n", includeLine); err != nil {
		f.Close()
		return fmt.Errorf("pgcluster: %w", err)
	}
	return f.Close()
}

// writeConf writes the settings of this start (the port may differ from the last run) into the
// file that postgresql.conf includes last.
func (c *Cluster) writeConf() error {
	if err := c.appendInclude(); err != nil {
		return err
	}
	set := map[string]string{
		"port":              strconv.Itoa(c.port),
		"listen_addresses":  "127.0.0.1",
		"logging_collector": "off",
	}
	if c.hasSocket() {
		set["unix_socket_directories"] = c.sockDir
	} else {
		// The postmaster cannot bind a socket path longer than sun_path; TCP alone will do.
		c.log.Warn("directory path too long for a Unix socket; listening on TCP only")
		set["unix_socket_directories"] = ""
	}
	if !c.durable {
		set["fsync"] = "off"
		set["full_page_writes"] = "off"
	}
	for k, v := range c.settings {
		set[k] = v
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by pgcluster at every start; edits are lost.\n")
	for _, k := range keys {
		v := strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(set[k])
		fmt.Fprintf(&b, "%s = '%s'\n", k, v)
	}
	path := filepath.Join(c.dataDir, confFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if c.cred != nil {
		if err := c.chown(path); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	return nil
}

var errPortInUse = errors.New("port in use")

func (c *Cluster) start(ctx context.Context) error {
	if err := c.writeConf(); err != nil {
		return err
	}
	var logStart int64
	if fi, err := os.Stat(c.logPath); err == nil {
		logStart = fi.Size()
	}
	begin := time.Now()
	out, err := c.runEnv(ctx, c.serverEnv(), "pg_ctl", "start", "-D", c.dataDir, "-l", c.logPath, "-w",
		"-t", strconv.Itoa(startTimeout), "-s")
	if err != nil {
		tail := readTail(c.logPath, logStart, 4096)
		err = fmt.Errorf("pgcluster: start PostgreSQL on 127.0.0.1:%d (data %s): %w\n%s\n--- tail of %s ---\n%s",
			c.port, c.dataDir, err, strings.TrimSpace(out), c.logPath, tail)
		if strings.Contains(tail, "Address already in use") {
			err = errors.Join(err, errPortInUse)
		}
		// A postmaster that outlived pg_ctl's wait would hold the port and the data directory.
		_ = c.stop(context.WithoutCancel(ctx), "immediate")
		return err
	}
	c.log.Info("PostgreSQL started", "port", c.port, "elapsed", time.Since(begin).Round(time.Millisecond))
	return nil
}

func (c *Cluster) stop(ctx context.Context, mode string) error {
	if pid, err := readPID(c.dataDir); err != nil || !isPostmasterOf(pid, c.dataDir) {
		return nil // not running; Restart's clearStale deals with a leftover postmaster.pid
	}
	out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", mode, "-w",
		"-t", strconv.Itoa(stopTimeout), "-s")
	if err != nil {
		if pid, perr := readPID(c.dataDir); perr != nil || !isPostmasterOf(pid, c.dataDir) {
			return nil // it died on its own meanwhile
		}
		return fmt.Errorf("pgcluster: pg_ctl stop -m %s: %w\n%s", mode, err, strings.TrimSpace(out))
	}
	c.log.Info("PostgreSQL stopped", "mode", mode)
	return nil
}

// clearStale deals with a postmaster.pid left behind. If its process is a postmaster of this very
// data directory (an earlier `opledger dev` that was killed without stopping it), that server is
// stopped so we start one with this run's settings. Otherwise the file is stale (the process is gone,
// or its pid was reused by an unrelated process) and is removed, because the postmaster would take a
// live unrelated process for a rival and refuse to start.
func (c *Cluster) clearStale(ctx context.Context) error {
	pid, err := readPID(c.dataDir)
	if err != nil {
		return nil
	}
	if isPostmasterOf(pid, c.dataDir) {
		c.log.Warn("a PostgreSQL server left running on this data directory; stopping it", "pid", pid)
		if err := c.stop(ctx, "fast"); err != nil {
			c.log.Warn("fast stop failed, stopping immediately", "err", err)
			if err := c.stop(ctx, "immediate"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := c.awaitLeftovers(ctx); err != nil {
		return err
	}
	// The socket lock files name the dead postmaster too. Until init reaps it (seconds, on some
	// machines) the postmaster's kill(pid, 0) check takes it for alive, so remove them as well:
	// the socket directory is private to this cluster, and no server of it runs.
	stale := []string{filepath.Join(c.dataDir, "postmaster.pid")}
	locks, _ := filepath.Glob(filepath.Join(c.sockDir, ".s.PGSQL.*.lock"))
	stale = append(stale, locks...)
	c.log.Warn("removing stale lock files", "pid", pid, "files", len(stale))
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgcluster: remove stale lock file: %w", err)
		}
	}
	return nil
}

// awaitLeftovers waits for the backends of a postmaster that died without cleaning up (SIGKILL):
// they keep the old shared memory attached until they notice their parent is gone. Backends that
// linger are killed: the data directory is ours and crash recovery follows anyway.
func (c *Cluster) awaitLeftovers(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	killed := false
	for {
		left := postgresProcsIn(c.dataDir)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if killed {
				return fmt.Errorf("pgcluster: processes %v of a previous server of %s do not exit", left, c.dataDir)
			}
			c.log.Warn("killing leftover processes of a previous server", "pids", left)
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			killed = true
			deadline = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting for a previous server of %s to exit: %w", c.dataDir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// postgresProcsIn lists the live postgres processes whose working directory is dataDir: the
// postmaster and backends of a server of that data directory.
func postgresProcsIn(dataDir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if isPostmasterOf(pid, dataDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isPostmasterOf reports whether pid is a live (not zombie) postgres process whose working
// directory is dataDir: the postmaster and its backends change into their data directory, which
// tells them apart from a process that merely inherited a recycled pid.
func isPostmasterOf(pid int, dataDir string) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "postgres" {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		want = dataDir
	}
	return cwd == want
}

func readPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("malformed postmaster.pid: %q", line)
	}
	return pid, nil
}

// run runs a PostgreSQL binary as the postgres user when we are root, in its own process group so
// that a Ctrl-C meant for us does not reach it (pg_ctl also detaches the postmaster it starts), and
// returns its combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	return c.runEnv(ctx, c.env(), name, args...)
}

func (c *Cluster) runEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// The postmaster's output goes to the log file, but should anything inherit our pipe, do not
	// wait for it forever.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// serverEnv is the environment the server runs in: env, and under a FakeClock the libfaketime
// preload reading its offset from the clock file (re-read every second, not on every call, which
// would cost a file read per clock reading, unless ClockNoCache asks for exactly that).
func (c *Cluster) serverEnv() []string {
	env := c.env()
	if c.clockFile != "" {
		cache := "FAKETIME_CACHE_DURATION=1"
		if c.clockNoCache {
			cache = "FAKETIME_NO_CACHE=1"
		}
		env = append(env, "LD_PRELOAD="+LibFaketime, "FAKETIME_TIMESTAMP_FILE="+c.clockFile,
			cache, "FAKETIME_DONT_RESET=1", "FAKETIME_DONT_FAKE_MONOTONIC=1")
	}
	return env
}

// env is our environment without the PG* variables (PGDATA, PGPORT… would redirect the tools) and
// with a fixed locale and time zone, so initdb writes the same configuration on every machine.
func (c *Cluster) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" || k == "TZ" || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "TZ=UTC", "HOME="+c.dir)
}

// readTail returns at most max bytes from the end of the part of path written after offset.
func readTail(path string, offset int64, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if offset > fi.Size() {
		offset = 0
	}
	if fi.Size()-offset > max {
		offset = fi.Size() - max
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, fi.Size()-offset))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(log is empty)"
	}
	return s
}
