package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// rawBytes sends and receives messages as they are, so that a test can send
// what no generated client would.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawBytes) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawBytes) Name() string { return "proto" }

// TestUndecodableRequestIsInvalid: a request that is not a well-formed
// protobuf message of its method's type (cut short, a wire type that does
// not fit, a string that is not UTF-8) is INVALID_ARGUMENT / FIELD_INVALID
// with one ErrorInfo, after authentication, like any other malformed field;
// grpc-go itself answers such a request INTERNAL, with no ErrorInfo, before
// any interceptor runs. Nothing is stored.
func TestUndecodableRequestIsInvalid(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	agent := env.Key("acme", "agent", "approver", "operator")
	bad := map[string][]byte{
		"cut short":       []byte("\x0a\x05ab"),
		"not a tag":       []byte("\xff\xff\xff"),
		"string not utf8": []byte("\x0a\x03\xff\xfe\xfd"),
	}
	for _, method := range []string{"Prepare", "Approve", "Execute", "Get", "Cancel", "Reconcile", "ListOperations"} {
		for name, in := range bad {
			var out []byte
			err := srv.Conn.Invoke(harness.Ctx(agent, harness.Unique("undecodable")), "/opledger.v1.LedgerService/"+method,
				&in, &out, grpc.ForceCodec(rawBytes{}))
			st := requireReason(t, err, codes.InvalidArgument, "FIELD_INVALID")
			require.Contains(t, st.Message(), "is not a well-formed opledger.v1."+method+"Request", "%s, %s", method, name)
		}
	}
	// Authentication comes first, as for any other request.
	in := bad["cut short"]
	var out []byte
	err := srv.Conn.Invoke(t.Context(), "/opledger.v1.LedgerService/Get", &in, &out, grpc.ForceCodec(rawBytes{}))
	requireReason(t, err, codes.Unauthenticated, "API_KEY_MISSING")

	list, err := srv.Client.ListOperations(harness.Ctx(agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetOperations(), "nothing was prepared")
}
