package harness

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/server"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/opledger with failpoints compiled in, once per test
// binary, and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		dir, err := os.MkdirTemp("", "opledger-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "opledger")
		cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", binPath, "./cmd/opledger")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// Process is a real `opledger serve` process.
type Process struct {
	t      testing.TB
	env    []string
	Addr   string
	cmd    *exec.Cmd
	logs   *syncBuffer
	mu     sync.Mutex
	done   chan struct{}
	Client opledgerv1.LedgerServiceClient
}

// ProcessOptions tunes a serve process; Env entries (KEY=VALUE) are added
// to its environment, e.g. OPLEDGER_FAILPOINTS or OPLEDGER_MIN_LEASE.
type ProcessOptions struct {
	Env []string
}

// StartProcess starts `opledger serve` on a free port against the Env's
// database and fake processor and waits until its health check serves.
func (e *Env) StartProcess(opts ProcessOptions) *Process {
	t := e.T
	t.Helper()
	port, err := pgcluster.FreePort()
	require.NoError(t, err)
	toolsFile := filepath.Join(t.TempDir(), "tools.yaml")
	require.NoError(t, os.WriteFile(toolsFile, e.ToolsYAML, 0o600))
	p := &Process{t: t, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	p.env = append(os.Environ(),
		"DATABASE_URL="+e.DBURL,
		"OPLEDGER_LISTEN="+p.Addr,
		"OPLEDGER_TOOLS="+toolsFile,
		"OPLEDGER_FAKEPAY_URL="+e.FakepayURL,
		"OPLEDGER_DOWNSTREAM_SECRET="+hex.EncodeToString(e.Secret),
		"OPLEDGER_LOG_LEVEL=warn",
		"OPLEDGER_DB_MAX_CONNS=16",
	)
	p.env = append(p.env, opts.Env...)
	p.start()
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		p.Kill()
	})
	p.Client = opledgerv1.NewLedgerServiceClient(conn)
	return p
}

func (p *Process) start() {
	p.t.Helper()
	p.mu.Lock()
	p.logs = &syncBuffer{}
	cmd := exec.Command(Binary(p.t), "serve")
	cmd.Env = p.env
	cmd.Stdout = p.logs
	cmd.Stderr = p.logs
	require.NoError(p.t, cmd.Start())
	p.cmd = cmd
	done := make(chan struct{})
	p.done = done
	p.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()
	p.waitHealthy()
}

func (p *Process) waitHealthy() {
	p.t.Helper()
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(p.t, err)
	defer conn.Close()
	err = server.WaitServing(context.Background(), conn, p.done, 30*time.Second)
	switch {
	case errors.Is(err, server.ErrExited):
		p.t.Fatalf("opledger serve exited during start:\n%s", p.Logs())
	case err != nil:
		p.t.Fatalf("opledger serve did not become healthy:\n%s", p.Logs())
	}
}

// Kill sends SIGKILL and waits for the process to die.
func (p *Process) Kill() { p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM (graceful shutdown) and waits for the exit.
func (p *Process) Stop() { p.signal(syscall.SIGTERM) }

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Exited reports whether the process has exited (for example killed by a
// failpoint).
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to d for the process to exit by itself.
func (p *Process) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Restart starts the process again with the same environment and port,
// after it exited.
func (p *Process) Restart(extraEnv ...string) {
	p.t.Helper()
	p.env = append(p.env, extraEnv...)
	p.start()
}

// Logs returns what the process printed so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// syncBuffer is a bytes.Buffer safe for the process's writer and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
