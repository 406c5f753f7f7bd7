package service_test

import (
	"bytes"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// answerDropper is a TCP proxy in front of PostgreSQL. Once armed, the
// connection whose client sends a chunk holding every needle gets no
// answer any more, and is reset 300 ms later: the statement reaches the
// database and commits, its answer is lost.
type answerDropper struct {
	ln      net.Listener
	mu      sync.Mutex
	needles [][]byte
	fired   atomic.Int32
}

func newAnswerDropper(t *testing.T, target string) *answerDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &answerDropper{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
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
			var drop atomic.Bool
			reset := func() {
				for _, x := range []net.Conn{c, s} {
					_ = x.(*net.TCPConn).SetLinger(0)
					_ = x.Close()
				}
			}
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
						if d.match(buf[:n]) {
							drop.Store(true)
							time.AfterFunc(300*time.Millisecond, reset)
						}
					}
					if err != nil {
						_ = s.Close()
						return
					}
				}
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && !drop.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = c.Close()
						return
					}
				}
			}()
		}
	}()
	return d
}

// lostAnswerWorld is a server whose database connections go through an
// answerDropper, an agent key and send_email's arguments.
func lostAnswerWorld(t *testing.T) (*answerDropper, *harness.Env, *harness.Server, string, *structpb.Struct) {
	t.Helper()
	u, err := url.Parse(pgtest.NewDatabase(t))
	require.NoError(t, err)
	proxy := newAnswerDropper(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	env := harness.New(t, harness.Options{DatabaseURL: u.String()})
	srv := env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second, ReconcileInterval: 100 * time.Millisecond}})
	args, err := structpb.NewStruct(map[string]any{"to": "a@example.com", "subject": "s", "body": "b"})
	require.NoError(t, err)
	return proxy, env, srv, env.Key("acme", "agent"), args
}

func (d *answerDropper) arm(needles ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.needles = nil
	for _, n := range needles {
		d.needles = append(d.needles, []byte(n))
	}
}

func (d *answerDropper) match(b []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.needles) == 0 {
		return false
	}
	for _, n := range d.needles {
		if !bytes.Contains(b, n) {
			return false
		}
	}
	d.needles = nil
	d.fired.Add(1)
	return true
}

// TestLostClaimAnswerIsReleased: the claim committed but its answer was
// lost with the connection (a failover, a proxy's reset). Execute answers
// UNAVAILABLE, having sent nothing; the claim it cannot see is released
// (READY, nothing sent), so the agent's retry sends the e-mail once, where
// the lease's end made the operation OUTCOME_UNKNOWN for an e-mail nobody
// sent (send_email: no deduplication, no lookup).
func TestLostClaimAnswerIsReleased(t *testing.T) {
	t.Parallel()
	proxy, env, srv, agent, args := lostAnswerWorld(t)
	prep, err := srv.Client.Prepare(harness.Ctx(agent, "k-lost-claim"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: args})
	require.NoError(t, err)
	id := prep.GetOperation().GetId()

	proxy.arm(id, "CLAIMED")
	_, err = srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: id})
	require.Equal(t, int32(1), proxy.fired.Load(), "the claim's answer was dropped")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	var op *opledgerv1.Operation
	require.Eventually(t, func() bool {
		r, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: id, Wait: durationpb.New(2 * time.Second)})
		if err != nil {
			t.Logf("retry: %v", err)
			return false
		}
		t.Logf("retry: %s %s", r.GetOperation().GetState(), r.GetOperation().GetError().GetMessage())
		op = r.GetOperation()
		return op.GetState() != opledgerv1.State_STATE_EXECUTING
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED.String(), op.GetState().String(), "%s", op.GetError().GetMessage())
	require.Len(t, env.Fakepay.Emails(), 1)
}

// TestLostOneCallInsertAnswerIsReleased: the same on the one-call path,
// where the statement that inserts the operation also claims it: the
// agent's retry of the same Prepare sends the e-mail once.
func TestLostOneCallInsertAnswerIsReleased(t *testing.T) {
	t.Parallel()
	proxy, env, srv, agent, args := lostAnswerWorld(t)
	req := &opledgerv1.PrepareRequest{Tool: "send_email", Args: args, Execute: true}
	proxy.arm("k-lost-insert", "CLAIMED")
	_, err := srv.Client.Prepare(harness.Ctx(agent, "k-lost-insert"), req)
	require.Equal(t, int32(1), proxy.fired.Load(), "the insert's answer was dropped")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	var op *opledgerv1.Operation
	require.Eventually(t, func() bool {
		r, err := srv.Client.Prepare(harness.Ctx(agent, "k-lost-insert"), req)
		if err != nil {
			t.Logf("retry: %v", err)
			return false
		}
		op = r.GetOperation()
		return op.GetState() != opledgerv1.State_STATE_EXECUTING
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED.String(), op.GetState().String(), "%s", op.GetError().GetMessage())
	require.Len(t, env.Fakepay.Emails(), 1)
}
