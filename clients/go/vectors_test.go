package client_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opledger/opledger/clients/go/internal/require"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/clients/go/fingerprint"
)

const testdata = "fingerprint/testdata"

func TestFingerprintVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(testdata, "vectors.json"))
	require.NoError(t, err)
	var file struct {
		Version string `json:"version"`
		Vectors []struct {
			Name        string          `json:"name"`
			Method      string          `json:"method"`
			Tenant      string          `json:"tenant"`
			Tool        string          `json:"tool"`
			ToolVersion string          `json:"tool_version"`
			Args        json.RawMessage `json:"args"`
			Canonical   string          `json:"canonical"`
			Fingerprint string          `json:"fingerprint"`
		} `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.Equal(t, "v1", file.Version)
	require.NotEmpty(t, file.Vectors)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			require.Equal(t, "/opledger.v1.LedgerService/Prepare", v.Method, "client.Fingerprint covers Prepare only")
			var args any = v.Args
			if string(v.Args) == "null" {
				args = nil
			}
			pre, err := fingerprint.Preimage(fingerprint.Input{Method: v.Method, Tenant: v.Tenant, Tool: v.Tool, ToolVersion: v.ToolVersion, Args: args})
			require.NoError(t, err)
			require.Equal(t, v.Canonical, string(pre))
			fp, err := client.Fingerprint(v.Tenant, v.Tool, v.ToolVersion, args)
			require.NoError(t, err)
			require.Equal(t, v.Fingerprint, fp)
		})
	}
}

func TestKeyVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(testdata, "key_vectors.json"))
	require.NoError(t, err)
	var file struct {
		Version string `json:"version"`
		Vectors []struct {
			Name         string `json:"name"`
			Conversation string `json:"conversation"`
			Round        int64  `json:"round"`
			ToolCall     string `json:"tool_call"`
			Tool         string `json:"tool"`
			ToolVersion  string `json:"tool_version"`
			Canonical    string `json:"canonical"`
			Key          string `json:"key"`
		} `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.Equal(t, "opk1", file.Version)
	require.Len(t, file.Vectors, 3)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			parts := client.KeyParts{Conversation: v.Conversation, Round: v.Round, ToolCall: v.ToolCall, Tool: v.Tool, ToolVersion: v.ToolVersion}
			pre, err := client.KeyPreimage(parts)
			require.NoError(t, err)
			require.Equal(t, v.Canonical, string(pre))
			key, err := client.DeriveKey(parts)
			require.NoError(t, err)
			require.Equal(t, v.Key, key)
			require.Len(t, key, 48)
		})
	}
}

func TestDeriveKeyRefusesIncompleteParts(t *testing.T) {
	t.Parallel()
	ok := client.KeyParts{Conversation: "c", Round: 0, ToolCall: "t", Tool: "pay_invoice"}
	_, err := client.DeriveKey(ok)
	require.NoError(t, err)
	for name, mut := range map[string]func(*client.KeyParts){
		"conversation":   func(p *client.KeyParts) { p.Conversation = "" },
		"tool":           func(p *client.KeyParts) { p.Tool = "" },
		"negative round": func(p *client.KeyParts) { p.Round = -1 },
		"huge round":     func(p *client.KeyParts) { p.Round = 1 << 53 },
		"invalid utf-8":  func(p *client.KeyParts) { p.Conversation = "\xff" },
	} {
		p := ok
		mut(&p)
		_, err := client.DeriveKey(p)
		require.Error(t, err, name)
	}
	// Every part matters; an empty tool call id is allowed.
	a, _ := client.DeriveKey(ok)
	ok.Round = 1
	b, _ := client.DeriveKey(ok)
	require.NotEqual(t, a, b)
	ok.ToolCall = ""
	c, err := client.DeriveKey(ok)
	require.NoError(t, err)
	require.NotEqual(t, b, c)
}

// TestInexactNumberVectors: the numbers a double cannot carry as written
// are refused before anything is sent, as every client refuses them
// (clients/testdata/inexact_numbers.json): Prepare with the args as JSON
// text (a model's) sends nothing and names the number.
func TestInexactNumberVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/inexact_numbers.json")
	require.NoError(t, err)
	var file struct {
		Vectors []struct {
			Args    string  `json:"args"`
			Refused *string `json:"refused"`
		} `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.True(t, len(file.Vectors) > 0)
	c, err := client.NewFromConn(nil, "k", client.RetryPolicy{}) // no connection: a refusal sends nothing
	require.NoError(t, err)
	for _, v := range file.Vectors {
		lit, _, bad := client.InexactNumber([]byte(v.Args))
		if v.Refused == nil {
			require.False(t, bad, "%s: %s", v.Args, lit)
			continue
		}
		require.True(t, bad, v.Args)
		require.Equal(t, *v.Refused, lit, v.Args)
		_, err := c.Prepare(context.Background(), "pay", json.RawMessage(v.Args), "k-1")
		require.Error(t, err, v.Args)
		require.Contains(t, err.Error(), *v.Refused)
	}
	_, err = c.Prepare(context.Background(), "pay", map[string]any{"id": int64(1234567890123456789)}, "k-1")
	require.Error(t, err)
	require.Contains(t, err.Error(), "1234567890123456789")
}
