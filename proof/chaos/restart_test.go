package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fakeServerEnv makes this test binary, started as "<binary> serve", act
// as an opledger server for the supervisor tests (see fakeServe).
const fakeServerEnv = "CHAOS_TEST_FAKE_SERVER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeServerEnv); dir != "" && len(os.Args) == 2 && os.Args[1] == "serve" {
		fakeServe(dir)
		return
	}
	os.Exit(m.Run())
}

// fakeServe is a server with after-commit armed the way a failover meets
// it: its first start with the point armed exits at once, as serve does
// when its connection lands on a read-only node; a later start with the
// point armed dies at the failpoint, printing what proof/failpoint prints;
// without it, it serves health checks until it is stopped.
func fakeServe(dir string) {
	if strings.Contains(os.Getenv("OPLEDGER_FAILPOINTS"), "after-commit=1*kill") {
		marker := filepath.Join(dir, "refused-once")
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o600)
			fmt.Fprintln(os.Stderr, "ValidateConnect failed: read only connection")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "failpoint after-commit: SIGKILL")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	lis, err := net.Listen("tcp", os.Getenv("OPLEDGER_LISTEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer()) // SERVING
	_ = g.Serve(lis)
}

// TestArmedFailpointSurvivesFailedStart arms after-commit on a server whose
// next start fails before any traffic (a read-only node in a failover).
// The supervisor's restart must keep the point armed, or the forced fault
// vanishes and a failover run ends with fp-after-commit never injected.
func TestArmedFailpointSurvivesFailedStart(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(fakeServerEnv, dir)
	r := &Runner{opts: Options{Binary: os.Args[0], Dir: dir, Failpoints: true, Log: io.Discard},
		hist: NewHistory(io.Discard), start: time.Now()}
	r.phase.Store(phaseRun)
	r.nem = newNemesis(r)
	s, err := newServer(r, 1, "127.0.0.1:1", "127.0.0.1:1")
	require.NoError(t, err)
	t.Cleanup(func() {
		s.opMu.Lock()
		s.stop(true)
		s.opMu.Unlock()
		s.close()
	})
	s.opMu.Lock()
	require.NoError(t, s.start(context.Background(), r.failpointSpec()))
	s.opMu.Unlock()
	require.True(t, s.running())

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r.nem.armFailpoint(ctx, s, "after-commit") // returns once it fired, or at ctx's end
	require.Equal(t, 1, r.nem.summary().Injected["fp-after-commit"],
		"the armed failpoint was dropped by the restart after the failed start; server log:\n%s", readFile(s.logPath))
	require.Eventually(t, s.running, 10*time.Second, 20*time.Millisecond, "restarted without the point after it fired")
	s.mu.Lock()
	require.Empty(t, s.armed, "the point stays armed after it fired")
	s.mu.Unlock()
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestForcedOrderPutsFailpointsFirst: the failpoints, which take only when
// a request reaches them, are forced before every other kind, each run in
// its own order.
func TestForcedOrderPutsFailpointsFirst(t *testing.T) {
	t.Parallel()
	r := &Runner{opts: Options{Failpoints: true, Failover: "sync"}, rng: rand.New(rand.NewPCG(1, 2))}
	kinds := (&nemesis{r: r}).kinds()
	seen := map[string]bool{}
	for range 20 {
		order := forcedOrder(kinds, r.rand)
		require.ElementsMatch(t, kinds, order)
		fp := 0
		for i, k := range order {
			if strings.HasPrefix(k, "fp-") {
				require.Equal(t, fp, i, "a failpoint after another kind: %v", order)
				fp++
			}
		}
		require.Equal(t, 4, fp)
		seen[strings.Join(order, ",")] = true
	}
	require.Greater(t, len(seen), 1, "the order is not random")
}
