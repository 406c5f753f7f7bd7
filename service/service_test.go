package service

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsoleNeedsTLSOffLoopback: the console takes API keys and sets
// session cookies, so plain HTTP is refused off loopback unless an https
// console URL says a TLS proxy is in front.
func TestConsoleNeedsTLSOffLoopback(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	_, _, err := startConsole(Config{ConsoleListen: "0.0.0.0:0"}, nil, logger)
	require.ErrorContains(t, err, "needs TLS")
	for _, c := range []Config{
		{ConsoleListen: "127.0.0.1:0"},
		{ConsoleListen: "[::1]:0"},
		{ConsoleListen: "0.0.0.0:0", ConsoleURL: "https://approvals.example.com"},
		{ConsoleListen: "0.0.0.0:0", ConsoleURL: "HTTPS://approvals.example.com"}, // a scheme in capitals is https too
	} {
		srv, url, err := startConsole(c, nil, logger)
		if err != nil && strings.Contains(err.Error(), "cannot assign") {
			continue // no IPv6 loopback here
		}
		require.NoError(t, err, "%+v", c)
		require.NotEmpty(t, url)
		require.NoError(t, srv.Close())
	}
}
