package server_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/reason"
	"github.com/opledger/opledger/proof/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// requireReason checks that err is a gRPC status with code and exactly one
// ErrorInfo, in opledger's domain, carrying reason. It returns the status so
// that callers can look at further details.
func requireReason(t testing.TB, err error, code codes.Code, want string) *status.Status {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, code, st.Code(), "status: %v", err)
	var infos []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	require.Len(t, infos, 1, "want exactly one ErrorInfo in %v", err)
	require.Equal(t, reason.Domain, infos[0].GetDomain())
	require.Equal(t, want, infos[0].GetReason(), "status: %v", err)
	return st
}

// badRequestFields returns the fields a status's BadRequest detail names.
func badRequestFields(st *status.Status) []string {
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
}

// invoiceArgs are pay_invoice arguments for an invoice of that amount:
// pay_invoice's invoice is its business identity, so operations of
// different amounts (under different keys) are different invoices.
func invoiceArgs(t testing.TB, amount int) *structpb.Struct {
	t.Helper()
	return mustStruct(t, map[string]any{"invoice_id": fmt.Sprintf("INV-%d", amount), "amount_minor": amount, "currency": "EUR"})
}

// emailArgs are send_email arguments with the given body.
func emailArgs(t testing.TB, body string) *structpb.Struct {
	t.Helper()
	return mustStruct(t, map[string]any{"to": "ap@example.com", "subject": "Invoice INV-2048", "body": body})
}

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s
}

// prepare calls Prepare with key and idem and requires success.
func prepare(t testing.TB, c opledgerv1.LedgerServiceClient, key, idem, tool string, args *structpb.Struct) *opledgerv1.PrepareResponse {
	t.Helper()
	resp, err := c.Prepare(harness.Ctx(key, idem), &opledgerv1.PrepareRequest{Tool: tool, ToolVersion: "1", Args: args})
	require.NoError(t, err)
	return resp
}

// get reads an operation and requires success.
func get(t testing.TB, c opledgerv1.LedgerServiceClient, key, id string, events bool) *opledgerv1.GetResponse {
	t.Helper()
	resp, err := c.Get(harness.Ctx(key, ""), &opledgerv1.GetRequest{OperationId: id, IncludeEvents: events})
	require.NoError(t, err)
	return resp
}
