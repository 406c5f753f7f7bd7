package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/service"
)

// MCPConfig is every setting of `opledger mcp`. Each field is set by a flag
// or, when the flag is not given, by the environment variable named with
// it. The two secrets come only from the environment, never from a flag
// (which other users of the machine could read in the process list).
type MCPConfig struct {
	// Listen serves streamable HTTP on HOST:PORT at /mcp (--listen,
	// OPLEDGER_MCP_LISTEN); empty: one session over stdio.
	Listen string
	// Token, when set, is required as `Authorization: Bearer <token>` on
	// every HTTP request (OPLEDGER_MCP_TOKEN only). A --listen address that
	// is not loopback requires it.
	Token string
	// Conn is how the gateway reaches the ledger: --target
	// (OPLEDGER_TARGET), the agent key (OPLEDGER_API_KEY only), --tls
	// (OPLEDGER_TARGET_TLS), --tls-ca, --tls-cert, --tls-key
	// (OPLEDGER_TARGET_TLS_CA, _CERT, _KEY).
	Conn mcpgateway.ConnConfig
	// Wait, CallTimeout and SessionTimeout are mcpgateway.Options' (--wait,
	// --call-timeout, --session-timeout; OPLEDGER_MCP_WAIT,
	// OPLEDGER_MCP_CALL_TIMEOUT, OPLEDGER_MCP_SESSION_TIMEOUT).
	Wait, CallTimeout, SessionTimeout time.Duration
	// StartTimeout bounds listing the ledger's tools at start
	// (--start-timeout, OPLEDGER_MCP_START_TIMEOUT).
	StartTimeout time.Duration
	// LogLevel is debug, info, warn or error (--log-level,
	// OPLEDGER_LOG_LEVEL); logs go to standard error.
	LogLevel string
	// Timeouts bound how long an HTTP client may take to send a request
	// (--header-timeout, --body-timeout, OPLEDGER_HEADER_TIMEOUT,
	// OPLEDGER_BODY_TIMEOUT), as serve's listeners do.
	Timeouts service.Timeouts
}

func cmdMCP(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("mcp", "[--listen HOST:PORT] [flags]", `
Runs the MCP gateway: a Model Context Protocol server offering the ledger's
tools (ListTools) to any MCP client, over stdio (the default: an MCP host
starts it as a subprocess) or over streamable HTTP at http://HOST:PORT/mcp
with --listen. Each tools/call becomes Prepare and Execute through the gRPC
service at --target, authenticated with the agent key in OPLEDGER_API_KEY;
a tool that needs approval answers "awaiting_approval" with an operation id,
and the check_operation tool reports (and, once approved, runs) it.

The ledger is reached in plaintext only when --tls is off, or when it is
auto (the default) and the target is a loopback address; otherwise TLS.
With --listen on a non-loopback address, OPLEDGER_MCP_TOKEN must be set and
every HTTP request must carry it as a bearer token. See docs/mcp.md.`)
	var cfg MCPConfig
	e := newEnvFlags(fs)
	e.str(&cfg.Listen, "listen", "OPLEDGER_MCP_LISTEN", "", "serve streamable HTTP on `HOST:PORT` (path /mcp) instead of stdio")
	e.str(&cfg.Conn.Target, "target", "OPLEDGER_TARGET", "127.0.0.1:50051", "the ledger's gRPC address `HOST:PORT`")
	e.str(&cfg.Conn.TLS, "tls", "OPLEDGER_TARGET_TLS", mcpgateway.TLSAuto, "TLS to the ledger: `auto` (plaintext only to a loopback target), on or off")
	e.str(&cfg.Conn.CAFile, "tls-ca", "OPLEDGER_TARGET_TLS_CA", "", "PEM `FILE` of the roots that sign the ledger's certificate (default: the system's)")
	e.str(&cfg.Conn.CertFile, "tls-cert", "OPLEDGER_TARGET_TLS_CERT", "", "PEM client certificate `FILE`, for a ledger that requires mTLS")
	e.str(&cfg.Conn.KeyFile, "tls-key", "OPLEDGER_TARGET_TLS_KEY", "", "PEM private key `FILE` of --tls-cert")
	e.duration(&cfg.Wait, "wait", "OPLEDGER_MCP_WAIT", mcpgateway.DefaultWait, "how long a call waits for an operation another caller is executing")
	e.duration(&cfg.CallTimeout, "call-timeout", "OPLEDGER_MCP_CALL_TIMEOUT", mcpgateway.DefaultCallTimeout, "bound on one tools/call; past it the answer is \"pending\"")
	e.duration(&cfg.SessionTimeout, "session-timeout", "OPLEDGER_MCP_SESSION_TIMEOUT", mcpgateway.DefaultSessionTimeout, "close an HTTP session idle this long (its derived keys go with it)")
	e.duration(&cfg.StartTimeout, "start-timeout", "OPLEDGER_MCP_START_TIMEOUT", 30*time.Second, "bound on reaching the ledger at start")
	e.str(&cfg.LogLevel, "log-level", "OPLEDGER_LOG_LEVEL", "info", "`level` of the JSON logs on standard error: debug, info, warn or error")
	bindTimeouts(e, &cfg.Timeouts, "the --listen HTTP listener")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	if err := checkLogLevel(cfg.LogLevel); err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	if err := checkTimeouts(cfg.Timeouts); err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	cfg.Conn.APIKey = getenv("OPLEDGER_API_KEY")
	cfg.Token = getenv("OPLEDGER_MCP_TOKEN")
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"wait", cfg.Wait}, {"call-timeout", cfg.CallTimeout}, {"session-timeout", cfg.SessionTimeout}, {"start-timeout", cfg.StartTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("mcp: --%s: %s is not positive", d.name, d.v)
		}
	}
	if cfg.Listen != "" && cfg.Token == "" && !loopbackListen(cfg.Listen) {
		return fmt.Errorf("mcp: --listen %s is not a loopback address: set OPLEDGER_MCP_TOKEN, which every HTTP request must then carry as a bearer token (whoever reaches the gateway acts with its agent key)", cfg.Listen)
	}
	return runMCP(ctx, cfg, stderr, nil)
}

// runMCP runs the gateway until ctx ends (or, over stdio, the client
// closes). ready, if set, receives the HTTP address once it listens.
func runMCP(ctx context.Context, cfg MCPConfig, stderr io.Writer, ready func(addr string)) error {
	// The gateway names the component of its lines itself ("mcp", and "go-sdk" for the SDK's): it
	// gets the logger without one, or the SDK's lines would carry "component" twice.
	base := newLogger(stderr, cfg.LogLevel)
	logger := base.With("component", "mcp")
	ledger, err := mcpgateway.Dial(cfg.Conn)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	defer ledger.Close()
	startCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	gw, err := mcpgateway.New(startCtx, ledger, mcpgateway.Options{
		Wait: cfg.Wait, CallTimeout: cfg.CallTimeout, SessionTimeout: cfg.SessionTimeout, Logger: base,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("mcp: ledger at %s: %w", cfg.Conn.Target, err)
	}
	plain, _ := cfg.Conn.Plaintext()
	var names []string
	for _, t := range gw.Tools() {
		names = append(names, t.GetName()+"@"+t.GetVersion())
	}
	if cfg.Listen == "" {
		logger.Info("serving MCP over stdio", "target", cfg.Conn.Target, "plaintext", plain, "tools", names)
		return gw.ServeStdio(ctx)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", gw.HTTPHandler(cfg.Token))
	srv := service.HTTPServer(mux, cfg.Timeouts, logger)
	logger.Info("serving MCP over streamable HTTP", "url", "http://"+lis.Addr().String()+"/mcp", "target", cfg.Conn.Target,
		"plaintext", plain, "token_required", cfg.Token != "", "tools", names)
	if ready != nil {
		ready(lis.Addr().String())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = srv.Close()
	return nil
}

// loopbackListen reports whether a listen address binds only this machine.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
