package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/service"
)

// parseConfig parses args over env the way serve does.
func parseConfig(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg Config
	finish := bindConfig(fs, &cfg, func(k string) string { return env[k] })
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, finish()
}

// TestConfigFlagsAndEnvironment: a flag beats its variable, which beats the
// default; bad values are refused with the flag's name.
func TestConfigFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 16384, cfg.FinishedCache)
	require.Equal(t, 720*time.Hour, cfg.Retention)
	require.Equal(t, 16384, service.FinishedCacheSize(cfg.FinishedCache))

	cfg, err = parseConfig(t, nil, map[string]string{"OPLEDGER_FINISHED_CACHE": "0", "OPLEDGER_RETENTION": "48h"})
	require.NoError(t, err)
	require.Equal(t, 0, cfg.FinishedCache)
	require.Equal(t, -1, service.FinishedCacheSize(cfg.FinishedCache), "0 turns the ledger's cache off")
	require.Equal(t, 48*time.Hour, cfg.Retention)

	cfg, err = parseConfig(t, []string{"--finished-cache", "100"}, map[string]string{"OPLEDGER_FINISHED_CACHE": "0"})
	require.NoError(t, err)
	require.Equal(t, 100, cfg.FinishedCache)

	_, err = parseConfig(t, []string{"--finished-cache", "-3"}, nil)
	require.ErrorContains(t, err, "--finished-cache")
	_, err = parseConfig(t, []string{"--retention", "soon"}, nil)
	require.ErrorContains(t, err, "-retention")

	// Variables go through the flag's own type, and a bad one is named.
	cfg, err = parseConfig(t, nil, map[string]string{"OPLEDGER_REFLECTION": "false", "OPLEDGER_RATE_LIMIT": "2.5",
		"OPLEDGER_AUTH_CACHE_TTL": "5s", "OPLEDGER_DOWNSTREAM_SECRET": "00112233445566778899aabbccddeeff"})
	require.NoError(t, err)
	require.False(t, cfg.Reflection)
	require.Equal(t, 2.5, cfg.RateLimit)
	require.Equal(t, 5*time.Second, cfg.AuthCacheTTL)
	require.Len(t, cfg.DownstreamSecret, 16)
	cfg, err = parseConfig(t, []string{"--reflection=true", "--auth-cache-ttl", "1s"}, map[string]string{"OPLEDGER_REFLECTION": "false", "OPLEDGER_AUTH_CACHE_TTL": "5s"})
	require.NoError(t, err)
	require.True(t, cfg.Reflection, "the flag beats its variable")
	require.Equal(t, time.Second, cfg.AuthCacheTTL)
	_, err = parseConfig(t, nil, map[string]string{"OPLEDGER_RETENTION": "soon"})
	require.ErrorContains(t, err, `OPLEDGER_RETENTION: "soon" is not a valid --retention`)
	_, err = parseConfig(t, nil, map[string]string{"OPLEDGER_DOWNSTREAM_SECRET": "not-hex-but-secret"})
	require.ErrorContains(t, err, "OPLEDGER_DOWNSTREAM_SECRET")
	require.NotContains(t, err.Error(), "not-hex-but-secret", "a secret is never echoed")
	require.Equal(t, ledger.DefaultAuthCacheTTL, mustConfig(t).AuthCacheTTL)
}

func mustConfig(t *testing.T) Config {
	t.Helper()
	cfg, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	return cfg
}

// TestConsoleFlags: the console's address and URL come from flags or the
// environment; plain HTTP is refused off loopback unless an https URL says
// a TLS proxy is in front.
func TestConsoleFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, nil, map[string]string{"OPLEDGER_CONSOLE_LISTEN": "127.0.0.1:8081"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8081", cfg.ConsoleListen)
	require.Equal(t, "http://127.0.0.1:8081", service.ConsoleURL(cfg))
	cfg, err = parseConfig(t, []string{"--console-listen", "", "--console-url", "https://approvals.example.com/"},
		map[string]string{"OPLEDGER_CONSOLE_LISTEN": "127.0.0.1:8081"})
	require.NoError(t, err)
	require.Empty(t, cfg.ConsoleListen)
	require.Equal(t, "https://approvals.example.com", service.ConsoleURL(cfg))
	_, err = parseConfig(t, []string{"--console-url", "approvals.example.com"}, nil)
	require.ErrorContains(t, err, "--console-url")

}

// TestApprovalWebhookFlags: the notification needs an http(s) URL and a
// secret to sign with; args stay out unless asked for.
func TestApprovalWebhookFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	require.Empty(t, cfg.ApprovalWebhookURL)
	require.False(t, cfg.ApprovalWebhookArgs)
	require.Equal(t, time.Second, cfg.ApprovalWebhookBackoff)

	cfg, err = parseConfig(t, []string{"--approval-webhook-args", "--approval-webhook-backoff", "250ms"}, map[string]string{
		"OPLEDGER_APPROVAL_WEBHOOK_URL": "https://hooks.example.com/opledger", "OPLEDGER_APPROVAL_WEBHOOK_SECRET": "0123456789abcdef"})
	require.NoError(t, err)
	require.True(t, cfg.ApprovalWebhookArgs)
	require.Equal(t, 250*time.Millisecond, cfg.ApprovalWebhookBackoff)
	require.Equal(t, "https://hooks.example.com/opledger", cfg.ApprovalWebhookURL)

	_, err = parseConfig(t, []string{"--approval-webhook-url", "https://hooks.example.com/opledger"}, nil)
	require.ErrorContains(t, err, "--approval-webhook-secret")
	_, err = parseConfig(t, []string{"--approval-webhook-url", "hooks.example.com", "--approval-webhook-secret", "0123456789abcdef"}, nil)
	require.ErrorContains(t, err, "--approval-webhook-url")
}

// TestGCPercent: serve and dev set the collector's target from the config
// (400 by default, OPLEDGER_GC_PERCENT or --gc-percent), except when GOGC
// is set, which the runtime has applied and which wins.
func TestGCPercent(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	p, ok := gcPercent(cfg, func(string) string { return "" })
	require.True(t, ok)
	require.Equal(t, 400, p)

	cfg, err = parseConfig(t, nil, map[string]string{"OPLEDGER_GC_PERCENT": "150"})
	require.NoError(t, err)
	p, ok = gcPercent(cfg, func(string) string { return "" })
	require.True(t, ok)
	require.Equal(t, 150, p)

	_, ok = gcPercent(cfg, func(k string) string { return map[string]string{"GOGC": "off"}[k] })
	require.False(t, ok, "GOGC set: left as the runtime applied it")

	_, err = parseConfig(t, []string{"--gc-percent", "0"}, nil)
	require.ErrorContains(t, err, "--gc-percent")
}

// TestFloorGCPercent: the bench's floor child runs with serve's collector
// target, so that the chain floor measures the chain as a server runs it.
func TestFloorGCPercent(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	p, ok, err := floorGCPercent(env(nil))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 400, p)

	p, ok, err = floorGCPercent(env(map[string]string{"OPLEDGER_GC_PERCENT": "150"}))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 150, p)

	_, ok, err = floorGCPercent(env(map[string]string{"OPLEDGER_GC_PERCENT": "150", "GOGC": "100"}))
	require.NoError(t, err)
	require.False(t, ok, "GOGC set: left as the runtime applied it")

	_, _, err = floorGCPercent(env(map[string]string{"OPLEDGER_GC_PERCENT": "many"}))
	require.ErrorContains(t, err, "OPLEDGER_GC_PERCENT")
}

// TestBadLogLevelIsRefused: a misspelt level is refused at start with the
// flag's and the variable's name, instead of logging at info.
func TestBadLogLevelIsRefused(t *testing.T) {
	t.Parallel()
	_, err := parseConfig(t, []string{"--log-level", "verbose"}, nil)
	require.ErrorContains(t, err, "--log-level")
	_, err = parseConfig(t, nil, map[string]string{"OPLEDGER_LOG_LEVEL": "eror"})
	require.ErrorContains(t, err, "OPLEDGER_LOG_LEVEL")
	for _, ok := range []string{"debug", "info", "warn", "error", "WARN"} {
		_, err = parseConfig(t, []string{"--log-level", ok}, nil)
		require.NoError(t, err, ok)
	}
}

// TestConsoleOnEveryInterfaceNeedsItsURLForLinks: approval notifications
// link to the console; when it listens on every interface, its own address
// (0.0.0.0, ::) reaches nobody, so --console-url must say where people
// reach it.
func TestConsoleOnEveryInterfaceNeedsItsURLForLinks(t *testing.T) {
	t.Parallel()
	hook := []string{"--approval-webhook-url", "https://hooks.example.com/opledger", "--approval-webhook-secret", "0123456789abcdef"}
	for _, listen := range []string{"0.0.0.0:8443", "[::]:8443", ":8443"} {
		_, err := parseConfig(t, append([]string{"--console-listen", listen, "--tls-cert", "c.pem", "--tls-key", "k.pem"}, hook...), nil)
		require.ErrorContains(t, err, "--console-url", listen)
		_, err = parseConfig(t, append([]string{"--console-listen", listen, "--tls-cert", "c.pem", "--tls-key", "k.pem",
			"--console-url", "https://approvals.example.com"}, hook...), nil)
		require.NoError(t, err, listen)
		_, err = parseConfig(t, []string{"--console-listen", listen, "--tls-cert", "c.pem", "--tls-key", "k.pem"}, nil)
		require.NoError(t, err, "no notifications, no links: %s", listen)
	}
	_, err := parseConfig(t, append([]string{"--console-listen", "127.0.0.1:8081"}, hook...), nil)
	require.NoError(t, err)
}

// TestTimeoutFlags: the listeners' timeouts come from their flags or
// variables, default to service's defaults, and must be positive.
func TestTimeoutFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	require.Equal(t, service.Timeouts{Header: service.DefaultHeaderTimeout, Body: service.DefaultBodyTimeout}, cfg.Timeouts)
	cfg, err = parseConfig(t, []string{"--header-timeout", "2s"}, map[string]string{"OPLEDGER_BODY_TIMEOUT": "1m", "OPLEDGER_HEADER_TIMEOUT": "9s"})
	require.NoError(t, err)
	require.Equal(t, service.Timeouts{Header: 2 * time.Second, Body: time.Minute}, cfg.Timeouts)
	_, err = parseConfig(t, []string{"--body-timeout", "0s"}, nil)
	require.ErrorContains(t, err, "--body-timeout: 0s is not positive")
}
