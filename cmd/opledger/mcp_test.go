package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMCPRefusesUnsafeOrIncompleteSetups: `opledger mcp` stops before
// serving when it would expose its agent key (an HTTP listener off loopback
// without a token), has no key, or is given contradictory TLS settings.
func TestMCPRefusesUnsafeOrIncompleteSetups(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		name   string
		args   []string
		getenv func(string) string
		want   string
	}{
		{"no agent key", nil, env(), "OPLEDGER_API_KEY is not set"},
		{"public listener without a token", []string{"--listen", "0.0.0.0:0"}, env("OPLEDGER_API_KEY", "k"), "OPLEDGER_MCP_TOKEN"},
		{"public listener from the environment", nil, env("OPLEDGER_API_KEY", "k", "OPLEDGER_MCP_LISTEN", "192.0.2.1:8080"), "OPLEDGER_MCP_TOKEN"},
		{"tls off with a CA", []string{"--tls", "off", "--tls-ca", "ca.pem"}, env("OPLEDGER_API_KEY", "k"), "contradicts"},
		{"unknown tls mode", []string{"--tls", "maybe"}, env("OPLEDGER_API_KEY", "k"), `"maybe" is not auto, on or off`},
		{"zero wait", []string{"--wait", "0s"}, env("OPLEDGER_API_KEY", "k"), "--wait"},
	} {
		err := run(context.Background(), append([]string{"mcp"}, c.args...), io.Discard, io.Discard, c.getenv)
		require.ErrorContains(t, err, c.want, c.name)
		require.NotContains(t, err.Error(), "hunter2")
	}
}
