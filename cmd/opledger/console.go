package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/ledger"
)

// consoleURL is where people reach the console: --console-url, else the
// console's own address (https when it serves TLS); empty when it is off.
func consoleURL(cfg Config) string {
	if cfg.ConsoleURL != "" {
		return strings.TrimSuffix(cfg.ConsoleURL, "/")
	}
	if cfg.ConsoleListen == "" {
		return ""
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + cfg.ConsoleListen
}

// startConsole serves the approval console on cfg.ConsoleListen until the
// returned server is closed. The browser must reach it over HTTPS (served
// here with --tls-cert, or behind a proxy named by an https --console-url),
// except on a loopback address, where plain HTTP is allowed and cookies
// cannot be marked Secure (docs/console.md).
func startConsole(cfg Config, l *ledger.Ledger, logger *slog.Logger) (*http.Server, string, error) {
	secure := cfg.TLSCert != "" || strings.HasPrefix(cfg.ConsoleURL, "https://")
	host, _, err := net.SplitHostPort(cfg.ConsoleListen)
	if err != nil {
		return nil, "", fmt.Errorf("--console-listen: %w", err)
	}
	if !secure && !loopback(host) {
		return nil, "", errors.New("--console-listen: the console takes API keys and sets session cookies, so on a non-loopback address it needs TLS (--tls-cert/--tls-key) or an https --console-url of the TLS proxy in front of it")
	}
	lis, err := net.Listen("tcp", cfg.ConsoleListen)
	if err != nil {
		return nil, "", fmt.Errorf("console listener: %w (choose another address with --console-listen HOST:PORT; an empty one turns the console off)", err)
	}
	srv := &http.Server{
		Handler:           console.New(l, console.Options{Logger: logger.With("component", "console"), Secure: secure}),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			_ = lis.Close()
			return nil, "", fmt.Errorf("console tls: %w", err)
		}
		// Browsers present no client certificates: the console authenticates
		// with keys and sessions even when gRPC requires mTLS.
		lis = tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	go func() { _ = srv.Serve(lis) }()
	url := consoleURL(cfg)
	if cfg.ConsoleURL == "" {
		url = strings.Replace(url, cfg.ConsoleListen, lis.Addr().String(), 1)
	}
	logger.Info("serving the approval console", "listen", lis.Addr().String(), "url", url, "secure_cookies", secure)
	return srv, url, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
