package executor

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Direct is the executors' default http.RoundTripper: HTTP/1.1 with keep-alive, in which the
// calling goroutine writes the request and reads the answer itself. net/http's Transport hands
// every request to a writing goroutine and every answer back from a reading one, four goroutine
// switches per call that cost a replica more CPU than the request itself (docs/performance.md,
// finding 22). Requests that an environment proxy would carry go to Fallback instead.
//
// What it sends is what net/http sends (Request.Write), and the answer is read by
// http.ReadResponse; httptrace's WroteHeaders fires as with net/http: once the headers are in
// the connection's 4 KiB buffer, before it is flushed (headers larger than the buffer are partly
// written before it, and the server never has them whole), which is how the executor tells "not
// sent" from "may have been sent". A request is never re-sent: an error after that point is the
// caller's to classify.
type Direct struct {
	// TLS is the configuration for https URLs (nil: the system's roots). HTTP/2 is not offered.
	TLS *tls.Config
	// Proxy picks a proxy for a request, as http.Transport's field does; a request with one is
	// sent by Fallback (an error without one). Nil: no proxy.
	Proxy func(*http.Request) (*url.URL, error)
	// Fallback sends the requests Direct does not (proxied ones).
	Fallback http.RoundTripper
	// MaxIdlePerHost bounds the kept-alive connections per host (0: 16).
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle for longer (0: 30 s). A server that closes idle
	// connections sooner is noticed before the next request (connAlive); what remains is a
	// server closing one just as a request is written to it, an ambiguous send.
	IdleTimeout time.Duration

	dialer net.Dialer
	mu     sync.Mutex
	idle   map[string][]*directConn
}

// NewDirect returns a Direct with the defaults: the environment's proxies (sent by a clone of
// http.DefaultTransport), 16 idle connections per host, 30 s idle timeout.
func NewDirect() *Direct {
	fb := http.DefaultTransport.(*http.Transport).Clone()
	fb.MaxIdleConnsPerHost = 16
	fb.IdleConnTimeout = 30 * time.Second
	return &Direct{Proxy: http.ProxyFromEnvironment, Fallback: fb}
}

type directConn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	// idleTimer closes the connection when it has been idle for IdleTimeout.
	idleTimer *time.Timer
}

// maxInterim bounds the 1xx answers read before the final one, as net/http does.
const maxInterim = 5

// RoundTrip implements http.RoundTripper.
func (d *Direct) RoundTrip(req *http.Request) (*http.Response, error) {
	if d.Proxy != nil {
		if p, err := d.Proxy(req); err != nil || p != nil {
			if d.Fallback == nil {
				closeReqBody(req)
				return nil, errors.New("a proxy is configured for this request, and Direct has no Fallback to send it")
			}
			return d.Fallback.RoundTrip(req)
		}
	}
	ctx := req.Context()
	key, addr, err := directKey(req.URL)
	if err != nil {
		closeReqBody(req)
		return nil, err
	}
	c, err := d.get(ctx, key, addr, req.URL)
	if err != nil {
		closeReqBody(req)
		return nil, ctxErr(ctx, err)
	}
	dl, hasDeadline := ctx.Deadline()
	// A call that ended while it waited for a connection is provably not sent: say so rather
	// than write it into a buffer whose flush then fails.
	if err := ctx.Err(); err != nil || hasDeadline && !time.Now().Before(dl) {
		closeReqBody(req)
		d.put(key, c)
		return nil, ctxErr(ctx, os.ErrDeadlineExceeded)
	}
	// So is an operation's first request whose approval ended while the connection was being
	// set up (a dial, a TLS handshake): the approval bounds when the first send may start, and
	// this is the last moment before anything is written.
	if sendBy, ok := ctx.Value(sendByKey{}).(time.Time); ok && !time.Now().Before(sendBy) {
		closeReqBody(req)
		d.put(key, c)
		return nil, errApprovalEnded
	}
	if hasDeadline {
		_ = c.conn.SetDeadline(dl)
	}
	// A cancelled call unblocks a write or read at once; no goroutine waits for it.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = c.conn.Close()
		return nil, ctxErr(ctx, err)
	}
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	var resp *http.Response
	for interim := 0; ; interim++ {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		// 1xx answers are interim (101 aside): the final one follows on the connection.
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		_ = resp.Body.Close()
		if interim+1 >= maxInterim {
			return fail(fmt.Errorf("more than %d interim (1xx) answers", maxInterim))
		}
	}
	reuse := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &directBody{d: d, c: c, key: key, ctx: ctx, stop: stop, body: resp.Body, reuse: reuse}
	return resp, nil
}

// CloseIdleConnections closes the kept-alive connections (and Fallback's).
func (d *Direct) CloseIdleConnections() {
	d.mu.Lock()
	idle := d.idle
	d.idle = nil
	d.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.idleTimer.Stop()
			_ = c.conn.Close()
		}
	}
	if ci, ok := d.Fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// get returns a kept-alive connection that is still open, or dials one.
func (d *Direct) get(ctx context.Context, key, addr string, u *url.URL) (*directConn, error) {
	timeout := d.IdleTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	for {
		d.mu.Lock()
		cs := d.idle[key]
		var c *directConn
		if n := len(cs); n > 0 {
			c = cs[n-1]
			cs[n-1] = nil
			d.idle[key] = cs[:n-1]
		}
		d.mu.Unlock()
		if c == nil {
			break
		}
		// Popped under the lock: a timer that fires now finds it gone and leaves it.
		c.idleTimer.Stop()
		if time.Since(c.idleSince) < timeout && c.br.Buffered() == 0 && connAlive(c.conn) {
			return c, nil
		}
		_ = c.conn.Close()
	}
	conn, err := d.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if d.TLS != nil {
			cfg = d.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		conn = tc
	}
	return &directConn{conn: conn, br: bufio.NewReader(conn), bw: bufio.NewWriter(conn)}, nil
}

// put keeps c for the next request to key, or closes it when the pool is full.
func (d *Direct) put(key string, c *directConn) {
	limit := d.MaxIdlePerHost
	if limit <= 0 {
		limit = 16
	}
	timeout := d.IdleTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	c.idleSince = time.Now()
	d.mu.Lock()
	if d.idle == nil {
		d.idle = map[string][]*directConn{}
	}
	kept := len(d.idle[key]) < limit
	if kept {
		d.idle[key] = append(d.idle[key], c)
		if c.idleTimer == nil {
			c.idleTimer = time.AfterFunc(timeout, func() { d.expire(key, c) })
		} else {
			c.idleTimer.Reset(timeout)
		}
	}
	d.mu.Unlock()
	if !kept {
		_ = c.conn.Close()
	}
}

// expire closes c if it is still idle in the pool: a connection nobody takes is not left
// open (in CLOSE_WAIT once the server gave up on it) until the next request.
func (d *Direct) expire(key string, c *directConn) {
	d.mu.Lock()
	cs := d.idle[key]
	i := slices.Index(cs, c)
	if i >= 0 {
		d.idle[key] = slices.Delete(cs, i, i+1)
	}
	d.mu.Unlock()
	if i >= 0 {
		_ = c.conn.Close()
	}
}

// directBody is an answer's body: read to its end and closed, it gives the connection back.
type directBody struct {
	d     *Direct
	c     *directConn
	key   string
	ctx   context.Context
	stop  func() bool
	body  io.ReadCloser
	reuse bool
	eof   bool
	done  atomic.Bool
}

func (b *directBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		return 0, errors.New("http: read on closed response body")
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		err = ctxErr(b.ctx, err)
	}
	return n, err
}

func (b *directBody) Close() error {
	if !b.done.CompareAndSwap(false, true) {
		return nil
	}
	// stop reports false when the cancellation already ran (or is running): the connection's
	// deadline is then in the past, and it is not reused.
	if b.stop() && b.eof && b.reuse {
		_ = b.body.Close()
		_ = b.c.conn.SetDeadline(time.Time{})
		b.d.put(b.key, b.c)
		return nil
	}
	// Closed first: net/http's body would otherwise read what is left of the answer, up to
	// the deadline, for a connection that is not reused anyway.
	err := b.c.conn.Close()
	_ = b.body.Close()
	return err
}

// aLongTimeAgo is a deadline in the past, which unblocks a connection's reads and writes.
var aLongTimeAgo = time.Unix(1, 0)

// ctxErr is err, or the context's error when the context ended: a deadline set from the
// context, or the one its cancellation sets, surfaces as the context's error, as net/http's.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// directKey is the pool's key of u (scheme and host:port) and the address to dial.
func directKey(u *url.URL) (key, addr string, err error) {
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
	default:
		return "", "", fmt.Errorf("unsupported protocol scheme %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", "", errors.New("no host in request URL")
	}
	addr = net.JoinHostPort(u.Hostname(), port)
	return u.Scheme + "://" + addr, addr, nil
}
