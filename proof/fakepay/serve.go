package fakepay

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long a stopping server waits for requests in flight (a long injected
// Delay among them) before it closes their connections.
const shutdownGrace = 5 * time.Second

// ListenAndServe runs a fresh Server on addr (HOST:PORT) until ctx is cancelled, then stops
// gracefully. It backs `opledger fakepay --listen ADDR`. A nil logger logs nothing.
func ListenAndServe(ctx context.Context, addr string, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return New(Options{Logger: logger}).Serve(ctx, ln)
}

// Serve serves s on ln until ctx is cancelled, then stops gracefully and returns nil; it closes
// ln. Listening first and serving second lets a caller pick port 0 and learn the address.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("fakepay: listening", "addr", ln.Addr().String())
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.log.Info("fakepay: stopped")
	return nil
}
