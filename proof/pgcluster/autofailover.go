package pgcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opledger/opledger/store"
)

// AutoFailoverOptions configures StartAutoFailover.
type AutoFailoverOptions struct {
	// Dir holds everything of the formation: Dir/monitor and Dir/nodeN (data
	// directories), Dir/home (HOME and the XDG directories where pg_autoctl
	// keeps its configuration and state) and Dir/*.log (pg_autoctl's output,
	// PostgreSQL's own log included). As with Options.Dir, every parent must
	// be traversable by the postgres user when the process is root.
	Dir string
	// BinDir holds pg_ctl and the other server binaries; "" picks the newest
	// /usr/lib/postgresql/*/bin whose version has the pgautofailover
	// extension installed.
	BinDir string
	// Database is created on the first primary (pg_autoctl's --dbname) and
	// replicated like everything else; default "postgres".
	Database string
	// Async registers every node with replication-quorum false, so that
	// synchronous_standby_names stays empty: commits are acknowledged before
	// the standby has them. The default is pg_auto_failover's: synchronous
	// replication to the standby while it is healthy.
	Async bool
	// Nodes is the number of PostgreSQL nodes (default 2: a primary and a
	// standby).
	Nodes int
	// MonitorPort is the monitor's port on 127.0.0.1; 0 picks a free one.
	MonitorPort int
	// NodePorts are the nodes' PostgreSQL ports on 127.0.0.1; a missing or 0
	// entry picks a free one.
	NodePorts []int
	// NodeHosts are the addresses under which each node is registered with
	// the monitor: the monitor's health checks and the standby's replication
	// connect to NodeHosts[i]:NodePorts[i]. "" (the default) is 127.0.0.1,
	// the node itself. Another loopback address (127.0.0.11, say) lets the
	// caller put a TCP proxy there, listening on the node's port, so that a
	// network partition of the node can be staged.
	NodeHosts []string
	// MonitorAddrs are, per node, the HOST:PORT through which its keeper
	// reaches the monitor; "" is the monitor itself. A proxy there cuts a
	// node off from the monitor.
	MonitorAddrs []string
	// Settings are extra postgresql.conf settings for the PostgreSQL nodes,
	// such as max_connections.
	Settings map[string]string
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// The timing of failover detection, written into the monitor's
// postgresql.conf and each keeper's configuration. pg_auto_failover's
// defaults (5s health checks, 20s before a node counts as unhealthy, 30s for
// the primary to drain) make a failover take about a minute; these make it
// take seconds, which a test of what clients see during failovers needs.
// The keeper of a primary cut off from both the monitor and its standby
// (its walsender gone after wal_sender_timeout, 2s) stops PostgreSQL after
// FailoverPartitionTimeout, before the monitor (unhealthy after 3s, then 5s
// of demote timeout) promotes the standby.
var monitorTiming = map[string]string{
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "1000",
	"pgautofailover.health_check_max_retries":          "1",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "3000",
	"pgautofailover.primary_demote_timeout":            "5000",
	"pgautofailover.startup_grace_period":              "3000",
}

// debianSocketDir is PostgreSQL's default Unix socket directory on Debian.
const debianSocketDir = "/var/run/postgresql"

// FailoverPartitionTimeout is the keepers' timeout.network_partition_timeout:
// how long a primary that reaches neither the monitor nor a standby keeps
// running before it demotes itself.
const FailoverPartitionTimeout = 3 * time.Second

// NodeState is one node as the monitor sees it (`pg_autoctl show state`).
type NodeState struct {
	ID       int    `json:"node_id"`
	Name     string `json:"nodename"`
	Host     string `json:"nodehost"`
	Port     int    `json:"nodeport"`
	Reported string `json:"current_group_state"`
	Assigned string `json:"assigned_group_state"`
	Health   int    `json:"health"`
	LSN      string `json:"reported_lsn"`
	Timeline int    `json:"reported_tli"`
}

// AutoFailover is a pg_auto_failover formation of throwaway processes: a
// monitor and Nodes PostgreSQL nodes, each run by its own `pg_autoctl run`
// (as the postgres user when we are root). The monitor decides failovers and
// the keepers carry them out; this type only starts, kills and restarts the
// processes and reads the monitor's view. Its methods are safe for
// concurrent use.
type AutoFailover struct {
	dir, home, binDir, autoctl string
	database                   string
	cred                       *syscall.Credential
	log                        *slog.Logger
	monitorPort                int
	monitor                    *afProc
	nodes                      []*afProc
	ports                      []int
	hosts                      []string
}

// afProc is one `pg_autoctl run`.
type afProc struct {
	name, pgdata, logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// FindAutoCtl returns the pg_autoctl binary and a PostgreSQL bin directory
// whose version has the pgautofailover extension (Debian's
// postgresql-NN-auto-failover), or an error saying what to install.
func FindAutoCtl() (autoctl, binDir string, err error) {
	autoctl, err = exec.LookPath("pg_autoctl")
	if err != nil {
		return "", "", errors.New("pgcluster: pg_autoctl not found; install pg_auto_failover (apt-get install postgresql-15-auto-failover)")
	}
	matches, _ := filepath.Glob("/usr/share/postgresql/*/extension/pgautofailover.control")
	sort.Slice(matches, func(i, j int) bool {
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(matches[i]))), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(matches[j]))), 64)
		return vi > vj
	})
	for _, m := range matches {
		v := filepath.Base(filepath.Dir(filepath.Dir(m)))
		bin := filepath.Join("/usr/lib/postgresql", v, "bin")
		if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err == nil {
			return autoctl, bin, nil
		}
	}
	return "", "", errors.New("pgcluster: no PostgreSQL version with the pgautofailover extension found; install postgresql-15-auto-failover")
}

// StartAutoFailover creates the monitor and the nodes and runs them until
// the formation is stable: one primary, the others secondaries. The first
// node starts as the primary.
func StartAutoFailover(ctx context.Context, opts AutoFailoverOptions) (*AutoFailover, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgcluster: AutoFailoverOptions.Dir is required")
	}
	for k, v := range opts.Settings {
		if !settingName.MatchString(k) || strings.ContainsAny(v, "\n\r\x00") {
			return nil, fmt.Errorf("pgcluster: invalid setting %q", k)
		}
	}
	autoctl, binDir, err := FindAutoCtl()
	if err != nil {
		return nil, err
	}
	if opts.BinDir != "" {
		binDir = opts.BinDir
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 2
	}
	if opts.Database == "" {
		opts.Database = "postgres"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &AutoFailover{dir: dir, home: filepath.Join(dir, "home"), binDir: binDir, autoctl: autoctl,
		database: opts.Database, log: logger.With("component", "pgcluster", "formation", dir)}
	if os.Geteuid() == 0 {
		if a.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	if err := a.prepareDirs(); err != nil {
		return nil, err
	}
	if a.monitorPort = opts.MonitorPort; a.monitorPort == 0 {
		if a.monitorPort, err = FreePort(); err != nil {
			return nil, err
		}
	}
	for i := range opts.Nodes {
		port := 0
		if i < len(opts.NodePorts) {
			port = opts.NodePorts[i]
		}
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		host := "127.0.0.1"
		if i < len(opts.NodeHosts) && opts.NodeHosts[i] != "" {
			host = opts.NodeHosts[i]
		}
		a.ports = append(a.ports, port)
		a.hosts = append(a.hosts, host)
	}

	ok := false
	defer func() {
		if !ok {
			_ = a.Stop(context.WithoutCancel(ctx))
		}
	}()
	begin := time.Now()
	a.monitor = &afProc{name: "monitor", pgdata: filepath.Join(dir, "monitor"), logPath: filepath.Join(dir, "monitor.log")}
	if out, err := a.run(ctx, "create", "monitor", "--pgdata", a.monitor.pgdata, "--pgctl", filepath.Join(binDir, "pg_ctl"),
		"--pgport", strconv.Itoa(a.monitorPort), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--auth", "trust", "--no-ssl"); err != nil {
		return nil, fmt.Errorf("pgcluster: pg_autoctl create monitor: %w\n%s", err, out)
	}
	if err := appendConf(a.monitor.pgdata, monitorTiming); err != nil {
		return nil, err
	}
	if err := a.start(a.monitor); err != nil {
		return nil, err
	}
	if err := a.waitFor(ctx, 60*time.Second, "the monitor to answer", func(s []NodeState) bool { return true }); err != nil {
		return nil, err
	}

	// A primary's keeper takes itself for partitioned only when it reaches
	// neither the monitor nor a standby, and it counts a standby as
	// reached while its walsender lives. wal_sender_timeout (60s by
	// default) must therefore end the walsender of a vanished standby
	// well before the monitor promotes it, or a partitioned primary keeps
	// serving (and, when the partition heals, serves next to the new one).
	settings := map[string]string{"fsync": "off", "wal_sender_timeout": "2s"}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	for i := range opts.Nodes {
		monitorAddr := fmt.Sprintf("127.0.0.1:%d", a.monitorPort)
		if i < len(opts.MonitorAddrs) && opts.MonitorAddrs[i] != "" {
			monitorAddr = opts.MonitorAddrs[i]
		}
		n := &afProc{name: fmt.Sprintf("node%d", i+1), pgdata: filepath.Join(dir, fmt.Sprintf("node%d", i+1)),
			logPath: filepath.Join(dir, fmt.Sprintf("node%d.log", i+1))}
		a.nodes = append(a.nodes, n)
		args := []string{"create", "postgres", "--pgdata", n.pgdata, "--pgctl", filepath.Join(binDir, "pg_ctl"),
			"--pgport", strconv.Itoa(a.ports[i]), "--pghost", "127.0.0.1", "--listen", "127.0.0.1",
			"--hostname", a.hosts[i], "--name", n.name, "--dbname", opts.Database,
			"--monitor", "postgres://autoctl_node@" + monitorAddr + "/pg_auto_failover?sslmode=disable",
			"--auth", "trust", "--no-ssl"}
		if opts.Async {
			args = append(args, "--replication-quorum", "false")
		}
		if out, err := a.run(ctx, args...); err != nil {
			return nil, fmt.Errorf("pgcluster: pg_autoctl create postgres (%s): %w\n%s", n.name, err, out)
		}
		if i == 0 {
			// The standbys are copies of the first node, configuration
			// files included.
			if err := appendConf(n.pgdata, settings); err != nil {
				return nil, err
			}
		}
		if out, err := a.run(ctx, "config", "set", "--pgdata", n.pgdata, "timeout.network_partition_timeout",
			strconv.Itoa(int(FailoverPartitionTimeout/time.Second))); err != nil {
			return nil, fmt.Errorf("pgcluster: pg_autoctl config set (%s): %w\n%s", n.name, err, out)
		}
		if err := a.start(n); err != nil {
			return nil, err
		}
		want := i + 1
		if err := a.waitFor(ctx, 120*time.Second, fmt.Sprintf("%s to join", n.name), func(s []NodeState) bool {
			return len(s) == want && stable(s)
		}); err != nil {
			return nil, err
		}
	}
	a.log.Info("formation ready", "elapsed", time.Since(begin).Round(time.Millisecond))
	ok = true
	return a, nil
}

// stable reports one primary (or a lone single) and every other node a
// secondary, each in the state the monitor assigned.
func stable(s []NodeState) bool {
	primaries := 0
	for _, n := range s {
		if n.Reported != n.Assigned {
			return false
		}
		switch n.Reported {
		case "primary", "single":
			primaries++
		case "secondary":
		default:
			return false
		}
	}
	return primaries == 1
}

// appendConf appends settings to pgdata/postgresql.conf, where they win
// over what initdb wrote (pg_autoctl's own file is included before the end).
func appendConf(pgdata string, settings map[string]string) error {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("\n# added by pgcluster\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(settings[k]))
	}
	f, err := os.OpenFile(filepath.Join(pgdata, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("pgcluster: %w", err)
	}
	return f.Close()
}

func (a *AutoFailover) prepareDirs() error {
	if err := os.MkdirAll(filepath.Dir(a.dir), 0o755); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.Mkdir(a.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if entries, _ := os.ReadDir(a.dir); len(entries) > 0 {
		return fmt.Errorf("pgcluster: %s is not empty; a formation is created from scratch", a.dir)
	}
	for _, d := range []string{a.home, filepath.Join(a.home, "config"), filepath.Join(a.home, "share"), filepath.Join(a.home, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	if a.cred == nil {
		return nil
	}
	// pg_autoctl's nodes keep PostgreSQL's default socket directory, which
	// Debian creates at boot (tmpfiles.d) and a container may lack.
	if _, err := os.Stat(debianSocketDir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(debianSocketDir, 0o2775); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if err := os.Chown(debianSocketDir, int(a.cred.Uid), int(a.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	c := &Cluster{dir: a.dir, cred: a.cred}
	if err := c.checkReachable(); err != nil {
		return err
	}
	return filepath.WalkDir(a.dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(a.cred.Uid), int(a.cred.Gid))
	})
}

// env is pg_autoctl's environment: its own HOME and XDG directories (its
// configuration and state files live there), the server binaries first on
// PATH, no PG* variables, a fixed locale and time zone.
func (a *AutoFailover) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || strings.HasPrefix(k, "XDG_") ||
			k == "LANG" || k == "LANGUAGE" || k == "TZ" || k == "HOME" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "TZ=UTC", "HOME="+a.home,
		"XDG_CONFIG_HOME="+filepath.Join(a.home, "config"), "XDG_DATA_HOME="+filepath.Join(a.home, "share"),
		"XDG_RUNTIME_DIR="+filepath.Join(a.home, "run"),
		"PATH="+a.binDir+":"+os.Getenv("PATH"))
}

// run runs one pg_autoctl command to completion and returns its output.
func (a *AutoFailover) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, a.autoctl, args...)
	cmd.Dir = a.dir
	cmd.Env = a.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: a.cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// start runs `pg_autoctl run` for p in its own process group (pg_autoctl
// and the postmaster it supervises share it), appending to p's log.
func (a *AutoFailover) start(p *afProc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return nil // running
		}
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	fmt.Fprintf(f, "=== pgcluster: pg_autoctl run --pgdata %s at %s\n", p.pgdata, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(a.autoctl, "run", "--pgdata", p.pgdata)
	cmd.Dir = a.dir
	cmd.Env = a.env()
	cmd.Stdout, cmd.Stderr = f, f
	// SIGTERM when we die: pg_autoctl then stops its PostgreSQL too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: a.cred, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("pgcluster: pg_autoctl run %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	return nil
}

// running reports whether p's pg_autoctl runs.
func (p *afProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill ends p's pg_autoctl and its PostgreSQL at once, as a machine that
// loses power would: SIGKILL to the process group, then to every postgres
// process of the data directory (backends have their own sessions).
func (p *afProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	for _, pid := range postgresProcsIn(p.pgdata) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if done != nil {
		<-done
	}
	// Backends notice their postmaster's death on their own; wait until
	// none holds the data directory, so that the next start is clean.
	deadline := time.Now().Add(10 * time.Second)
	for len(postgresProcsIn(p.pgdata)) > 0 && time.Now().Before(deadline) {
		for _, pid := range postgresProcsIn(p.pgdata) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends p gracefully (SIGTERM: pg_autoctl stops PostgreSQL fast), or
// kills it after timeout.
func (p *afProc) stop(timeout time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(timeout):
		p.kill()
	}
	if len(postgresProcsIn(p.pgdata)) > 0 {
		p.kill()
	}
}

// Nodes returns the number of PostgreSQL nodes.
func (a *AutoFailover) Nodes() int { return len(a.ports) }

// NodePort returns node i's PostgreSQL port on 127.0.0.1 (0-based i).
func (a *AutoFailover) NodePort(i int) int { return a.ports[i] }

// NodeAddr returns node i's address as registered with the monitor.
func (a *AutoFailover) NodeAddr(i int) string {
	return net.JoinHostPort(a.hosts[i], strconv.Itoa(a.ports[i]))
}

// NodeDir returns node i's data directory.
func (a *AutoFailover) NodeDir(i int) string { return a.nodes[i].pgdata }

// MonitorPort returns the monitor's port on 127.0.0.1.
func (a *AutoFailover) MonitorPort() int { return a.monitorPort }

// URL returns a multi-host connection URL of database over every node's
// registered address, with target_session_attrs=read-write: a client
// connects to whichever node is the primary now.
func (a *AutoFailover) URL(database string) string {
	addrs := make([]string, len(a.ports))
	for i := range a.ports {
		addrs[i] = a.NodeAddr(i)
	}
	return MultiHostURL(addrs, database)
}

// MultiHostURL is the connection URL of database as the superuser postgres
// over several HOST:PORT addresses, tried in order, of which only a
// read-write one (the primary) is taken.
func MultiHostURL(addrs []string, database string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write",
		strings.Join(addrs, ","), url.PathEscape(database))
}

// State returns the monitor's view of the nodes.
func (a *AutoFailover) State(ctx context.Context) ([]NodeState, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := a.run(ctx, "show", "state", "--pgdata", a.monitor.pgdata, "--json")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: pg_autoctl show state: %w: %s", err, strings.TrimSpace(out))
	}
	// pg_autoctl may log before the JSON document.
	if i := strings.IndexByte(out, '['); i > 0 {
		out = out[i:]
	}
	var s []NodeState
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return nil, fmt.Errorf("pgcluster: pg_autoctl show state: %w: %s", err, out)
	}
	sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID })
	return s, nil
}

// Primary returns the index of the node the monitor has as primary now
// (primary, wait_primary or single, in the state assigned), or -1.
func (a *AutoFailover) Primary(ctx context.Context) (int, error) {
	s, err := a.State(ctx)
	if err != nil {
		return -1, err
	}
	for _, n := range s {
		switch n.Reported {
		case "primary", "wait_primary", "single":
			if n.Reported == n.Assigned {
				return a.index(n), nil
			}
		}
	}
	return -1, nil
}

// index maps a monitor node to our node index by its port.
func (a *AutoFailover) index(n NodeState) int {
	for i, p := range a.ports {
		if p == n.Port {
			return i
		}
	}
	return -1
}

// WaitStable waits until the formation is stable again (one primary,
// secondaries), up to timeout.
func (a *AutoFailover) WaitStable(ctx context.Context, timeout time.Duration) error {
	return a.waitFor(ctx, timeout, "a stable formation", stable)
}

func (a *AutoFailover) waitFor(ctx context.Context, timeout time.Duration, what string, ok func([]NodeState) bool) error {
	deadline := time.Now().Add(timeout)
	var last []NodeState
	var lastErr error
	for {
		s, err := a.State(ctx)
		if err == nil && ok(s) {
			return nil
		}
		last, lastErr = s, err
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pgcluster: waiting for %s: %v (last state %+v, error %v); logs in %s", what, errors.Join(ctx.Err(), errors.New("timed out")), last, lastErr, a.dir)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// WaitReplicated waits until a standby streams from the primary and has
// flushed everything the primary had flushed when the wait began, up to
// timeout. After a crash of the primary's PostgreSQL that its keeper
// restarted in place, commits that were waiting for the standby at the crash
// are visible again without it (PostgreSQL documents this of synchronous
// replication); a failover before the standby has them loses them.
func (a *AutoFailover) WaitReplicated(ctx context.Context, timeout time.Duration) error {
	p, err := a.Primary(ctx)
	if err != nil {
		return err
	}
	if p < 0 {
		return errors.New("pgcluster: no primary")
	}
	direct := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", a.ports[p])
	secs := max(int(timeout/time.Second), 1)
	// pg_stat_get_wal_senders reads the walsenders' state afresh on every
	// call (pg_stat_replication's activity part is a per-transaction
	// snapshot).
	err = store.AdminExec(ctx, direct,
		"SELECT set_config('pgcluster.target', pg_current_wal_flush_lsn()::text, false)",
		fmt.Sprintf(`DO $$
DECLARE deadline timestamptz := clock_timestamp() + interval '%d seconds';
BEGIN
  LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_get_wal_senders() w
      WHERE w.state = 'streaming' AND w.flush_lsn >= current_setting('pgcluster.target')::pg_lsn);
    IF clock_timestamp() > deadline THEN
      RAISE EXCEPTION 'no standby has flushed %%', current_setting('pgcluster.target');
    END IF;
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$`, secs))
	if err != nil {
		return fmt.Errorf("pgcluster: waiting for the standby to catch up with node%d: %w", p+1, err)
	}
	return nil
}

// KillNode kills node i's pg_autoctl and PostgreSQL with SIGKILL. Nothing
// restarts them until StartNode: to the monitor the node is gone.
func (a *AutoFailover) KillNode(i int) { a.nodes[i].kill() }

// StartNode runs node i's pg_autoctl again (after KillNode). The keeper
// asks the monitor what to be: an old primary rejoins as a standby, after
// pg_rewind where it ran ahead of the new primary.
func (a *AutoFailover) StartNode(i int) error { return a.start(a.nodes[i]) }

// NodeRunning reports whether node i's pg_autoctl runs.
func (a *AutoFailover) NodeRunning(i int) bool { return a.nodes[i].running() }

// CrashPostgres stops node i's PostgreSQL the way a crash would (SIGQUIT to
// the postmaster: an immediate shutdown, crash recovery at the next start)
// and leaves its keeper running: the keeper and the monitor decide between
// a restart in place and a failover. It does not wait: the keeper may
// restart PostgreSQL within moments.
func (a *AutoFailover) CrashPostgres(i int) error {
	dataDir := a.nodes[i].pgdata
	pid, err := readPID(dataDir)
	if err != nil || !isPostmasterOf(pid, dataDir) {
		return fmt.Errorf("pgcluster: %s: PostgreSQL is not running", a.nodes[i].name)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("pgcluster: %s: %w", a.nodes[i].name, err)
	}
	return nil
}

// Stop stops every node and the monitor (SIGTERM, then SIGKILL after a
// while). The directory stays.
func (a *AutoFailover) Stop(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, n := range a.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.stop(30 * time.Second) }()
	}
	wg.Wait()
	if a.monitor != nil {
		a.monitor.stop(30 * time.Second)
	}
	return ctx.Err()
}
