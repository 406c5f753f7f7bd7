package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// statusCode is err's gRPC code (OK for nil).
func statusCode(err error) codes.Code { return status.Code(err) }

// rawPrepare sends one Prepare as a hand-made gRPC request over cleartext
// HTTP/2, for metadata that grpc-go's client refuses to send (non-ASCII
// values), and returns the call's status as an error (nil for OK).
func rawPrepare(t testing.TB, addr, apiKey, idem string, req *opledgerv1.PrepareRequest) error {
	t.Helper()
	msg, err := proto.Marshal(req)
	require.NoError(t, err)
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)

	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	t.Cleanup(client.CloseIdleConnections)
	hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
		"http://"+addr+"/opledger.v1.LedgerService/Prepare", bytes.NewReader(frame))
	require.NoError(t, err)
	hreq.Header.Set("content-type", "application/grpc")
	hreq.Header.Set("te", "trailers")
	hreq.Header.Set("authorization", "Bearer "+apiKey)
	hreq.Header["idempotency-key"] = []string{idem}
	resp, err := client.Do(hreq)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)

	// A refusal before any response message is "trailers-only": the status
	// arrives in the headers.
	header := func(k string) string {
		if v := resp.Trailer.Get(k); v != "" {
			return v
		}
		return resp.Header.Get(k)
	}
	code, err := strconv.Atoi(header("grpc-status"))
	require.NoError(t, err, "no grpc-status in the response")
	if code == 0 {
		return nil
	}
	details := header("grpc-status-details-bin")
	if details == "" {
		return status.Error(codes.Code(code), header("grpc-message"))
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(details, "="))
	require.NoError(t, err)
	var st spb.Status
	require.NoError(t, proto.Unmarshal(b, &st))
	require.Equal(t, int32(code), st.GetCode())
	return status.FromProto(&st).Err()
}
