package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/store"
)

// tcpProxy forwards connections to a target; hold stops forwarding (a
// partition: nothing passes, nothing is closed), reset closes every
// connection with a TCP RST.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	conns []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close(); p.reset() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if !held {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (p *tcpProxy) hold() { p.mu.Lock(); p.held = true; p.mu.Unlock() }

func (p *tcpProxy) reset() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// withHosts returns dbURL with its host:port replaced by hosts (comma
// separated) and extra query parameters added.
func withHosts(t *testing.T, dbURL, hosts string, query ...string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = hosts
	s := u.String()
	for _, q := range query {
		s += "&" + q
	}
	return s
}

func hostOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Host
}

// deadAddr is an address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	port, err := pgcluster.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func keyHash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func migrated(t *testing.T) string {
	t.Helper()
	u := pgtest.NewDatabase(t)
	_, err := store.Migrate(t.Context(), u)
	require.NoError(t, err)
	return u
}

// TestStatementCutOffIsUnavailable: a connection reset in the middle of a
// statement (a primary that died under it) is ErrUnavailable, the caller's
// cue to retry, not an internal error; the pool then connects afresh.
func TestStatementCutOffIsUnavailable(t *testing.T) {
	t.Parallel()
	u := migrated(t)
	p := newTCPProxy(t, hostOf(t, u))
	st, err := store.Open(t.Context(), store.Config{URL: withHosts(t, u, p.addr()), MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	p.hold()
	errc := make(chan error, 1)
	go func() {
		_, err := st.PrincipalByKeyHash(t.Context(), keyHash("nobody"))
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond) // the statement is on the wire, held
	p.reset()
	err = <-errc
	require.ErrorIs(t, err, store.ErrUnavailable, "got %v", err)

	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
	_, err = st.PrincipalByKeyHash(t.Context(), keyHash("nobody"))
	require.ErrorIs(t, err, store.ErrNotFound, "the pool reconnects by itself")
}

// TestTerminatedSessionsAreUnavailable: sessions ended by the server (as
// a fast shutdown or a failover manager does, SQLSTATE 57P01) answer
// ErrUnavailable once, and the pool replaces them without a restart.
func TestTerminatedSessionsAreUnavailable(t *testing.T) {
	t.Parallel()
	u := migrated(t)
	st, err := store.Open(t.Context(), store.Config{URL: u, MaxConns: 1})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.PrincipalByKeyHash(t.Context(), keyHash("nobody"))
	require.ErrorIs(t, err, store.ErrNotFound)
	dbName := strings.TrimPrefix(mustParse(t, u).Path, "/")
	require.NoError(t, store.AdminExec(t.Context(), u,
		fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid()", dbName)))
	_, err = st.PrincipalByKeyHash(t.Context(), keyHash("nobody"))
	if err != nil { // the pool may have noticed the dead session first
		require.ErrorIs(t, err, store.ErrUnavailable, "got %v", err)
	}
	_, err = st.PrincipalByKeyHash(t.Context(), keyHash("nobody"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// TestReadOnlyIsUnavailable: a write refused because the node is read-only
// (a standby, or a primary demoted under a pooled connection: SQLSTATE
// 25006) means the primary is elsewhere now: ErrUnavailable.
func TestReadOnlyIsUnavailable(t *testing.T) {
	t.Parallel()
	u := migrated(t)
	dbName := strings.TrimPrefix(mustParse(t, u).Path, "/")
	require.NoError(t, store.AdminExec(t.Context(), u, "ALTER DATABASE "+store.QuoteIdent(dbName)+" SET default_transaction_read_only = on"))
	st, err := store.Open(t.Context(), store.Config{URL: u, MaxConns: 1})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.PrincipalCreate(t.Context(), store.Principal{ID: "pr_ro", Tenant: "acme", Name: "ro", Roles: []string{"agent"}, KeyPrefix: "opk_ro"}, keyHash("ro"))
	require.ErrorIs(t, err, store.ErrUnavailable, "got %v", err)
}

// TestConnectTimeoutIsUnavailable: a server that accepts and never answers
// (a partitioned host) is unavailable once connect_timeout passes.
func TestConnectTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	_, err = store.Open(t.Context(), store.Config{URL: "postgres://postgres@" + ln.Addr().String() + "/x?sslmode=disable&connect_timeout=1"})
	require.ErrorIs(t, err, store.ErrUnavailable, "got %v", err)
}

// TestMultiHostURLFirstHostDown: a DATABASE_URL listing several hosts with
// target_session_attrs=read-write, whose first host is down, serves
// migrations, the pool and the notification listener from the next one.
func TestMultiHostURLFirstHostDown(t *testing.T) {
	t.Parallel()
	u := pgtest.NewDatabase(t)
	multi := withHosts(t, u, deadAddr(t)+","+hostOf(t, u), "target_session_attrs=read-write")
	_, err := store.Migrate(t.Context(), multi)
	require.NoError(t, err)
	st, err := store.Open(t.Context(), store.Config{URL: multi, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.PrincipalCreate(t.Context(), store.Principal{ID: "pr_mh", Tenant: "acme", Name: "mh", Roles: []string{"agent"}, KeyPrefix: "opk_mh"}, keyHash("mh"))
	require.NoError(t, err)

	l := store.NewListener(multi, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go l.Run(ctx)
	requireNotified(t, l, u, 20*time.Second)
}

// requireNotified waits until a NOTIFY sent on notifyURL wakes a waiter of
// l by itself: the listener listens on that server. The wake-up every
// waiter gets when the listener (re)connects does not count: a control
// waiter tells the two apart.
func requireNotified(t *testing.T, l *store.Listener, notifyURL string, within time.Duration) {
	t.Helper()
	id := fmt.Sprintf("op_%d", time.Now().UnixNano())
	target, stopT := l.Subscribe(id)
	defer stopT()
	control, stopC := l.Subscribe(id + "_control")
	defer stopC()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		_ = store.AdminExec(t.Context(), notifyURL, "SELECT pg_notify('opledger_operation', '"+id+"')")
		select {
		case <-target:
			select {
			case <-control: // a reconnect woke everyone: not proof
			default:
				return
			}
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("no notification reached the waiter within %s", within)
}

// TestListenerLeavesSilentConnection: when the listening connection goes
// silent (its server cut off by a partition: no reset, no FIN) the
// listener notices by a ping and listens on the next host of the URL,
// where notifications reach the waiters again.
func TestListenerLeavesSilentConnection(t *testing.T) {
	t.Parallel()
	u := pgtest.NewDatabase(t)
	p := newTCPProxy(t, hostOf(t, u))
	multi := withHosts(t, u, p.addr()+","+hostOf(t, u), "connect_timeout=1")
	l := store.NewListener(multi, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go l.Run(ctx)
	requireNotified(t, l, u, 20*time.Second) // listening through the proxy
	p.hold()
	requireNotified(t, l, u, 30*time.Second)
}
