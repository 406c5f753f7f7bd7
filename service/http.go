package service

import (
	"io"
	"log/slog"
	"net/http"
	"time"
)

// HTTPServer returns the server of one of opledger's HTTP listeners
// (webhooks, metrics, the console, and the MCP gateway's --listen), with
// t's bounds (defaults for zero fields): a request's headers must arrive
// within t.Header (an idle keep-alive connection is closed after as long),
// and its body within t.Body of its headers, else the connection is closed.
// The body's bound is a read deadline set when the handler starts and
// lifted once the body has been read to its end, not http.Server's
// ReadTimeout, which also ends the request's context when it passes: a
// handler that runs long after reading its request (the MCP gateway's
// streamed answers, a tool call) keeps running.
func HTTPServer(h http.Handler, t Timeouts, logger *slog.Logger) *http.Server {
	t = t.WithDefaults()
	s := &http.Server{Handler: bodyDeadline(h, t.Body), ReadHeaderTimeout: t.Header}
	if logger != nil {
		s.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	return s
}

// bodyDeadline bounds the reading of each request's body by d.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts its request's read deadline once the body is read to
// its end; what is not read stays bounded, as is the server's discarding of
// it after the handler.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
