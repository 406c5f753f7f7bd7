package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMakeDevInterruptIsClean runs `make dev` in a process group of its own and sends the whole
// group SIGINT, as Ctrl-C in a terminal does: make must not report the recipe as failed
// ("make: *** [Makefile:…: dev] Error 1", which it did while the recipe was `go run`: the go
// command exits 1 when it was interrupted, whatever its child does). make itself then ends by the
// signal, as an interrupted make does, and says nothing.
func TestMakeDevInterruptIsClean(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // PostgreSQL runs as the postgres user when we are root
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	cmd := exec.Command("make", "-C", root, "--no-print-directory", "dev",
		"DEV_FLAGS=--dir "+filepath.Join(dir, "dev")+" --listen 127.0.0.1:0 --fakepay-listen 127.0.0.1:0 --console-listen=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(out.String(), "opledger dev is ready") {
		require.True(t, time.Now().Before(deadline), "make dev did not become ready:\n%s", out)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	err = cmd.Wait()
	require.Contains(t, out.String(), "PostgreSQL stopped", "dev stopped its database")
	require.NotContains(t, out.String(), "make: ***", "make reported the interrupted recipe as failed")
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		ws := exit.Sys().(syscall.WaitStatus)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGINT, "make ended with %v, not by the interrupt:\n%s", err, out)
	}
}
