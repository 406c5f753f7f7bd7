package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// FuzzRequestPath sends arbitrary bytes as each method's request through
// the whole request path of a real server (codec, interceptors, handler,
// ledger, database). Every answer must be a success or a status with exactly
// one ErrorInfo; INTERNAL is a bug.
func FuzzRequestPath(f *testing.F) {
	seed := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	f.Add(uint8(0), seed(&opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: invoiceArgs(f, 4900)}), "k1")
	f.Add(uint8(0), seed(&opledgerv1.PrepareRequest{Tool: "send_email", Args: emailArgs(f, "hi")}), "k2")
	f.Add(uint8(1), seed(&opledgerv1.ApproveRequest{OperationId: "op_00000000000000000000000000", Fingerprint: "v1:00", Decision: 1}), "")
	f.Add(uint8(2), seed(&opledgerv1.ExecuteRequest{OperationId: "op_00000000000000000000000000"}), "")
	f.Add(uint8(3), seed(&opledgerv1.GetRequest{OperationId: "op_x", IncludeEvents: true}), "")
	f.Add(uint8(4), seed(&opledgerv1.ReconcileRequest{OperationId: "op_00000000000000000000000000", Resolution: &opledgerv1.Resolution{Outcome: 4}}), "")
	f.Add(uint8(5), seed(&opledgerv1.CancelRequest{OperationId: "op_00000000000000000000000000", Reason: "no longer needed"}), "")
	f.Add(uint8(6), seed(&opledgerv1.ListOperationsRequest{States: []opledgerv1.State{opledgerv1.State_STATE_READY}, Tool: "pay_invoice", PageSize: 2, PageToken: "AQ"}), "")
	env := harness.New(f, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	key := env.Key("fuzz", "agent", "approver", "operator")
	f.Fuzz(func(t *testing.T, which uint8, raw []byte, idem string) {
		ctx, cancel := context.WithTimeout(harness.Ctx(key, ""), 10*time.Second)
		defer cancel()
		if idem != "" && len(idem) < 200 && isASCII(idem) {
			ctx, cancel = context.WithTimeout(harness.Ctx(key, idem), 10*time.Second)
			defer cancel()
		}
		// Each method's raw bytes go out as they are: those that decode as
		// the method's request and those that do not (requestCodec).
		methods := []string{"Prepare", "Approve", "Execute", "Get", "Reconcile", "Cancel", "ListOperations"}
		var out []byte
		err := srv.Conn.Invoke(ctx, "/opledger.v1.LedgerService/"+methods[int(which)%len(methods)], &raw, &out,
			grpc.ForceCodec(rawBytes{}))
		if err == nil {
			return
		}
		st := status.Convert(err)
		if st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled {
			return // the fuzzer's own 10 s bound
		}
		if st.Code() == codes.Internal || st.Code() == codes.Unknown {
			t.Fatalf("request path failed: %v", err)
		}
		if st.Code() == codes.ResourceExhausted && len(st.Details()) == 0 {
			return // the transport's own size limit, before any opledger code
		}
		infos := 0
		for _, d := range st.Details() {
			if _, ok := d.(*errdetails.ErrorInfo); ok {
				infos++
			}
		}
		if infos != 1 {
			t.Fatalf("%v carries %d ErrorInfo details, want 1", err, infos)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
