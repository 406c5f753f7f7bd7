package executor

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSendByCoversConnectionSetup: an operation's first request may start
// only before its approval ends (Call.SendBy). The executor checks that
// before it asks for a connection; setting one up (a dial whose first SYN
// was lost, a slow TLS handshake) can outlast the approval, so the
// transport checks it again once it holds the connection, just before it
// writes: nothing reaches the downstream, and the attempt is "not sent".
func TestSendByCoversConnectionSetup(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, reply(200, `{"id":"ch_late"}`))
	d := NewDirect()
	d.Proxy = nil
	d.dialer.Control = func(string, string, syscall.RawConn) error {
		time.Sleep(800 * time.Millisecond) // a slow connect
		return nil
	}
	h, err := NewHTTP(HTTPConfig{URL: url, ExternalRefField: "id"}, &http.Client{Transport: d}, nil)
	require.NoError(t, err)
	c := call("k", `{}`)
	c.SendBy = time.Now().Add(200 * time.Millisecond)
	r := h.Send(t.Context(), c)
	require.Equal(t, OutcomeNotSubmitted, r.Outcome, r.Detail)
	require.Contains(t, r.Detail, "approval expired")
	require.Zero(t, s.count(), "nothing reached the downstream")
	require.Zero(t, r.Attempts)

	// The connection it set up is kept: the next call (no approval bound)
	// uses it at once and is sent.
	d.dialer.Control = nil
	r = h.Send(t.Context(), call("k2", `{}`))
	require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
	require.Equal(t, 1, s.count())
}
