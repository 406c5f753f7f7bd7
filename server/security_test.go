package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/server"
)

// pki is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and a client certificate.
type pki struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p := pki{pool: x509.NewCertPool(), server: issue(2, x509.ExtKeyUsageServerAuth), client: issue(3, x509.ExtKeyUsageClientAuth)}
	p.pool.AddCert(ca)
	return p
}

func dialWith(t *testing.T, addr string, creds credentials.TransportCredentials) opledgerv1.LedgerServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return opledgerv1.NewLedgerServiceClient(conn)
}

func TestTLSRefusesPlaintext(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}})
	agent := env.Key("acme", "agent")

	plain := dialWith(t, srv.Addr, insecure.NewCredentials())
	_, err := plain.Prepare(harness.Ctx(agent, "k1"), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: invoiceArgs(t, 4900)})
	require.Equal(t, codes.Unavailable, status.Code(err), "a plaintext client cannot talk to a TLS listener")

	secure := dialWith(t, srv.Addr, credentials.NewTLS(&tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}))
	r := prepare(t, secure, agent, "k1", "pay_invoice", invoiceArgs(t, 4900))
	require.False(t, r.GetReplayed())
}

func TestMTLSRefusesClientWithoutCertificate(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{p.server},
		ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
	agent := env.Key("acme", "agent")

	noCert := dialWith(t, srv.Addr, credentials.NewTLS(&tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}))
	_, err := noCert.Prepare(harness.Ctx(agent, "k1"), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: invoiceArgs(t, 4900)})
	require.Equal(t, codes.Unavailable, status.Code(err), "the handshake fails without a client certificate")

	withCert := dialWith(t, srv.Addr, credentials.NewTLS(&tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12}))
	r := prepare(t, withCert, agent, "k1", "pay_invoice", invoiceArgs(t, 4900))
	require.False(t, r.GetReplayed())
}

func TestRateLimitPerTenant(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{RateLimit: interceptors.RateLimit{PerSecond: 0.5, Burst: 2}})
	a, b := env.Key("acme", "agent"), env.Key("other", "agent")
	for i := 0; i < 2; i++ {
		_, err := srv.Client.Get(harness.Ctx(a, ""), &opledgerv1.GetRequest{OperationId: "op_00000000000000000000000000"})
		requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	}
	_, err := srv.Client.Get(harness.Ctx(a, ""), &opledgerv1.GetRequest{OperationId: "op_00000000000000000000000000"})
	st := requireReason(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	requireRetryInfo(t, st)
	_, err = srv.Client.Get(harness.Ctx(b, ""), &opledgerv1.GetRequest{OperationId: "op_00000000000000000000000000"})
	requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND") // another tenant has its own bucket
}

func requireRetryInfo(t *testing.T, st *status.Status) {
	t.Helper()
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			require.Positive(t, ri.GetRetryDelay().AsDuration())
			return
		}
	}
	t.Fatalf("no RetryInfo in %v", st.Details())
}

// TestQuotaExhaustion: a tenant that creates operations faster than its
// quota gets RESOURCE_EXHAUSTED with RetryInfo, and the refused operation is
// not stored; replays and other tenants are unaffected.
func TestQuotaExhaustion(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{Ledger: ledger.Config{OpsPerMinute: 3}})
	a, b := env.Key("acme", "agent"), env.Key("other", "agent")
	if time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)) < 5*time.Second {
		time.Sleep(6 * time.Second) // keep the test inside one quota minute
	}
	first := prepare(t, srv.Client, a, "q1", "send_email", emailArgs(t, "one"))
	prepare(t, srv.Client, a, "q2", "send_email", emailArgs(t, "two"))
	prepare(t, srv.Client, a, "q3", "send_email", emailArgs(t, "three"))
	_, err := srv.Client.Prepare(harness.Ctx(a, "q4"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: emailArgs(t, "four")})
	st := requireReason(t, err, codes.ResourceExhausted, "QUOTA_EXCEEDED")
	requireRetryInfo(t, st)

	again := prepare(t, srv.Client, a, "q1", "send_email", emailArgs(t, "one"))
	require.True(t, again.GetReplayed(), "a replay is not a new operation and passes the quota")
	require.Equal(t, first.GetOperation().GetId(), again.GetOperation().GetId())
	prepare(t, srv.Client, b, "q4", "send_email", emailArgs(t, "four")) // another tenant's quota
	_, err = srv.Client.Prepare(harness.Ctx(a, "q4"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: emailArgs(t, "changed")})
	requireReason(t, err, codes.ResourceExhausted, "QUOTA_EXCEEDED") // not KEY_REUSED: q4 was never stored
}

// TestMassAssignmentIgnored: a client that smuggles state, fence or tenant
// fields (unknown to PrepareRequest) changes nothing.
func TestMassAssignmentIgnored(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	agent := env.Key("acme", "agent")
	req := &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: invoiceArgs(t, 4900)}
	var raw []byte
	raw = protowire.AppendTag(raw, 6, protowire.VarintType) // Operation.state
	raw = protowire.AppendVarint(raw, uint64(opledgerv1.State_STATE_SUCCEEDED))
	raw = protowire.AppendTag(raw, 9, protowire.VarintType) // Operation.fence
	raw = protowire.AppendVarint(raw, 99)
	raw = protowire.AppendTag(raw, 16, protowire.BytesType) // Operation.tenant
	raw = protowire.AppendString(raw, "victim")
	req.ProtoReflect().SetUnknown(raw)
	resp, err := srv.Client.Prepare(harness.Ctx(agent, "mass"), req)
	require.NoError(t, err)
	op := resp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, op.GetState())
	require.Zero(t, op.GetFence())
	require.Equal(t, "acme", op.GetTenant())
}

// TestApprovalForgeryAfterArgsChanged: an approval shown for one amount
// cannot approve another operation with other args.
func TestApprovalForgeryAfterArgsChanged(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	small := prepare(t, srv.Client, agent, "small", "pay_invoice", invoiceArgs(t, 4900)).GetOperation()
	big := prepare(t, srv.Client, agent, "big", "pay_invoice", invoiceArgs(t, 49000)).GetOperation()
	_, err := srv.Client.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: big.GetId(),
		Fingerprint: small.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
	requireReason(t, err, codes.FailedPrecondition, "APPROVAL_FINGERPRINT_MISMATCH")
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, get(t, srv.Client, agent, big.GetId(), false).GetOperation().GetState())
}

// TestDeadlineExpiresMidExecute: the caller gives up while the downstream
// is slow; the ledger still records the truth, with one charge, and the
// next Execute replays it.
func TestDeadlineExpiresMidExecute(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	agent := env.Key("acme", "agent")
	op := prepare(t, srv.Client, agent, "slow", "send_email", emailArgs(t, "hello")).GetOperation()
	env.Fakepay.SetFaults(fakepay.Faults{Delay: 600 * time.Millisecond})

	ctx, cancel := context.WithTimeout(harness.Ctx(agent, ""), 100*time.Millisecond)
	defer cancel()
	_, err := srv.Client.Execute(ctx, &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))

	require.Eventually(t, func() bool {
		return get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 10*time.Second, 50*time.Millisecond)
	r, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.True(t, r.GetReplayed())
	require.Len(t, env.Fakepay.Emails(), 1)
}

// TestRetentionPrunesOnlyFinished: finished operations older than the
// retention are pruned (and their key becomes free again); open ones are
// never pruned. The retention is advertised in response metadata.
func TestRetentionPrunesOnlyFinished(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{Ledger: ledger.Config{Retention: 200 * time.Millisecond}})
	agent := env.Key("acme", "agent")
	var header metadata.MD
	done, err := srv.Client.Prepare(harness.Ctx(agent, "done"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: emailArgs(t, "x")}, grpc.Header(&header))
	require.NoError(t, err)
	require.Equal(t, []string{"200ms"}, header.Get(server.RetentionHeader))
	_, err = srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: done.GetOperation().GetId()})
	require.NoError(t, err)
	open := prepare(t, srv.Client, agent, "open", "pay_invoice", invoiceArgs(t, 4900)).GetOperation()

	time.Sleep(400 * time.Millisecond)
	n, err := srv.Ledger.Prune(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = srv.Client.Get(harness.Ctx(agent, ""), &opledgerv1.GetRequest{OperationId: done.GetOperation().GetId()})
	requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, get(t, srv.Client, agent, open.GetId(), false).GetOperation().GetState())

	reused := prepare(t, srv.Client, agent, "done", "send_email", emailArgs(t, "x"))
	require.False(t, reused.GetReplayed(), "a key whose operation was pruned starts a new operation")
	require.NotEqual(t, done.GetOperation().GetId(), reused.GetOperation().GetId())
}
