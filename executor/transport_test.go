package executor

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countConns serves ts and counts the connections it accepted.
func countConns(ts *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func TestDirectKeepsConnectionsAlive(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(&stub{answer: reply(200, `{"id":"ch_1"}`)})
	conns := countConns(ts)
	ts.Start()
	t.Cleanup(ts.Close)
	h, err := NewHTTP(HTTPConfig{URL: ts.URL, ExternalRefField: "id"}, nil, nil)
	require.NoError(t, err)
	for i := range 5 {
		r := h.Send(t.Context(), call("k"+string(rune('0'+i)), `{}`))
		require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
		require.Equal(t, "ch_1", r.ExternalRef)
	}
	require.EqualValues(t, 1, conns.Load(), "one kept-alive connection for calls in turn")
}

// rawServer accepts connections and gives each to serve, which speaks HTTP by hand.
func rawServer(t *testing.T, serve func(n int, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(n, c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestDirectSkipsConnectionClosedWhileIdle is why connAlive exists: a server that closes a
// kept-alive connection without saying so (an idle timeout, a restart) must not cost the next
// call an ambiguous send on the dead connection.
func TestDirectSkipsConnectionClosedWhileIdle(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 8)
	url := rawServer(t, func(n int, c net.Conn) {
		_, ok := readRequest(c)
		if !ok {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		// Close without "Connection: close": the client learns it only from the socket.
		_ = c.Close()
		closed <- struct{}{}
	})
	h, err := NewHTTP(HTTPConfig{URL: url}, nil, nil)
	require.NoError(t, err)
	for i := range 3 {
		r := h.Send(t.Context(), call("k", `{}`))
		require.Equal(t, OutcomeSucceeded, r.Outcome, "call %d: %s", i, r.Detail)
		// Wait until the server has closed, so that the next call finds the pooled
		// connection dead rather than racing the close.
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("server did not close")
		}
	}
}

func TestDirectInterimAnswersAreSkipped(t *testing.T) {
	t.Parallel()
	url := rawServer(t, func(_ int, c net.Conn) {
		if _, ok := readRequest(c); !ok {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"+
			"HTTP/1.1 201 Created\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"id\":\"c9\"}")
	})
	h, err := NewHTTP(HTTPConfig{URL: url, ExternalRefField: "id"}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
	require.Equal(t, http.StatusCreated, r.HTTPStatus)
	require.Equal(t, "c9", r.ExternalRef)
}

func TestDirectCancelUnblocksAWaitingCall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	url := rawServer(t, func(_ int, c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		<-release
	})
	h, err := NewHTTP(HTTPConfig{URL: url}, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	r := h.Send(ctx, call("k", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome, "sent and never answered")
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, r.Detail, "cancelled by the caller")

	// A deadline ends the call the same way, as the context's error.
	h, err = NewHTTP(HTTPConfig{URL: url, Timeout: 100 * time.Millisecond}, nil, nil)
	require.NoError(t, err)
	r = h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Contains(t, r.Detail, "timed out")
}

func TestDirectBodyNotReadToTheEndClosesTheConnection(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(&stub{answer: reply(200, `{"a":"`+strings.Repeat("x", 4096)+`"}`)})
	conns := countConns(ts)
	ts.Start()
	t.Cleanup(ts.Close)
	d := NewDirect()
	t.Cleanup(d.CloseIdleConnections)
	for range 2 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL, nil)
		require.NoError(t, err)
		resp, err := d.RoundTrip(req)
		require.NoError(t, err)
		_, err = resp.Body.Read(make([]byte, 16))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	require.EqualValues(t, 2, conns.Load(), "a connection with answer bytes left is never reused")
}

func TestDirectTLS(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(&stub{answer: reply(200, `{"id":"ch_t"}`)})
	ts.EnableHTTP2 = true
	conns := countConns(ts)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	d := NewDirect()
	d.TLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	h, err := NewHTTP(HTTPConfig{URL: ts.URL, ExternalRefField: "id"}, &http.Client{Transport: d}, nil)
	require.NoError(t, err)
	for range 3 {
		r := h.Send(t.Context(), call("k", `{}`))
		require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
		require.Equal(t, "ch_t", r.ExternalRef)
	}
	require.EqualValues(t, 1, conns.Load())

	// Without the server's certificate the handshake fails before anything is sent.
	h, err = NewHTTP(HTTPConfig{URL: ts.URL}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeNotSubmitted, r.Outcome, r.Detail)
	require.Contains(t, r.Detail, "certificate")
}

// TestDirectClosesWithoutReadingTheRest checks that closing an answer read only in part does
// not wait for the rest of it (net/http's body would read it, up to the deadline).
func TestDirectClosesWithoutReadingTheRest(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	url := rawServer(t, func(_ int, c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n"+strings.Repeat("x", 1024))
		<-release
	})
	d := NewDirect()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := d.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, make([]byte, 10))
	require.NoError(t, err)
	start := time.Now()
	_ = resp.Body.Close()
	require.Less(t, time.Since(start), 2*time.Second, "Close waited for the rest of the answer")
}

// TestDirectClosesIdleConnections checks that a kept-alive connection nobody takes is closed
// after IdleTimeout, without waiting for another request.
func TestDirectClosesIdleConnections(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	url := rawServer(t, func(_ int, c net.Conn) {
		br, ok := readRequest(c)
		if !ok {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
		_, _ = br.ReadByte() // returns when the client closes
		close(closed)
	})
	d := NewDirect()
	d.IdleTimeout = 50 * time.Millisecond
	h, err := NewHTTP(HTTPConfig{URL: url}, &http.Client{Transport: d}, nil)
	require.NoError(t, err)
	require.Equal(t, OutcomeSucceeded, h.Send(t.Context(), call("k", `{}`)).Outcome)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection was not closed")
	}
}

type recordingTransport struct{ hosts []string }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.hosts = append(r.hosts, req.URL.Host)
	return nil, errors.New("recorded")
}

func TestDirectLeavesProxiedRequestsToFallback(t *testing.T) {
	t.Parallel()
	fb := &recordingTransport{}
	d := &Direct{Fallback: fb, Proxy: func(r *http.Request) (*url.URL, error) {
		if r.URL.Hostname() == "proxied.example" {
			return url.Parse("http://proxy.example:3128")
		}
		return nil, nil
	}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://proxied.example/x", nil)
	require.NoError(t, err)
	_, err = d.RoundTrip(req)
	require.ErrorContains(t, err, "recorded")
	require.Equal(t, []string{"proxied.example"}, fb.hosts)

	// Without a Fallback, a proxied request is an error, never sent around the proxy.
	d2 := &Direct{Proxy: d.Proxy}
	req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, "http://proxied.example/x", nil)
	require.NoError(t, err)
	_, err = d2.RoundTrip(req)
	require.ErrorContains(t, err, "no Fallback")

	req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, "ftp://direct.example/x", nil)
	require.NoError(t, err)
	_, err = d.RoundTrip(req)
	require.ErrorContains(t, err, "unsupported protocol scheme")
	require.Len(t, fb.hosts, 1)
}

// readRequest reads one request from c and drains its body, as a server does before it answers;
// the reader is returned for what the test reads next. false: no request came.
func readRequest(c net.Conn) (*bufio.Reader, bool) {
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	return br, true
}
