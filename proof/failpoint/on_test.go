//go:build failpoints

package failpoint

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStopHelper is the process TestStopHoldsUntilSIGCONT stops: it hits a
// point armed with "stop" and says when it got past it.
func TestStopHelper(t *testing.T) {
	if os.Getenv("FAILPOINT_STOP_HELPER") == "" {
		t.Skip("run by TestStopHoldsUntilSIGCONT")
	}
	fmt.Println("before")
	Inject("point")
	fmt.Println("after")
}

// TestStopHoldsUntilSIGCONT: a "stop" point stops the whole process, and
// the goroutine that hit it goes on only after a SIGCONT, not as soon as
// its kill(2) returns (the chaos suite's stall relies on it).
func TestStopHoldsUntilSIGCONT(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "FAILPOINT_STOP_HELPER=1", "OPLEDGER_FAILPOINTS=point=1*stop")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	require.Equal(t, "before", waitLine(t, lines, "before"))
	deadline := time.Now().Add(10 * time.Second)
	for !stopped(cmd.Process.Pid) {
		require.True(t, time.Now().Before(deadline), "the process never stopped")
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case l := <-lines:
		require.NotEqual(t, "after", l, "went past the point while stopped")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	require.Equal(t, "after", waitLine(t, lines, "after"))
}

func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the helper ended before printing %q", want)
			if l == want {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q from the helper", want)
		}
	}
}

// stopped reads the process state from /proc: T is stopped.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}
