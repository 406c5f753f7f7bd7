package mcpgateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// MetaIdempotencyKey is the `_meta` entry of a tools/call request in which a
// host passes its own idempotency key for the call. The gateway sends it to
// Prepare unchanged (1 to 255 printable ASCII characters; the ledger checks
// it), so a host that keeps the key with its own record of the call makes
// every retry of it, from any session or gateway, the same operation.
const MetaIdempotencyKey = "opledger/idempotency_key"

// DerivedKeyPrefix starts every key the gateway derives; it names the
// derivation, so that a future change gets a new prefix instead of silently
// new keys.
const DerivedKeyPrefix = "mcp1-"

// DeriveKey returns the idempotency key of a tools/call that carries no
// MetaIdempotencyKey: "mcp1-" followed by the unpadded base64url SHA-256 of
// the RFC 8785 canonical JSON of {"session", "tool", "tool_version", "args"}.
//
// session is the gateway's random identifier of the MCP session (see
// sessionKeys), so "the same call" is the same tool version with the same
// arguments in the same session. The JSON-RPC request id is deliberately not
// part of it: the go-sdk and Python clients give every call, a retry
// included, a new id, and protocol 2026-07-28 re-issues a call whose stream
// broke under a new id, so an id-based key would turn each retry into a
// second operation.
func DeriveKey(session, tool, toolVersion string, args *structpb.Struct) (string, error) {
	if args == nil {
		args = &structpb.Struct{}
	}
	pre, err := fingerprint.Canonicalize(map[string]any{
		"session":      session,
		"tool":         tool,
		"tool_version": toolVersion,
		"args":         args,
	})
	if err != nil {
		return "", fmt.Errorf("canonical arguments: %w", err)
	}
	sum := sha256.Sum256(pre)
	return DerivedKeyPrefix + base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// explicitKey returns the host's key from the call's _meta, whether one was
// given, and an error when the entry is there but not a string.
func explicitKey(meta mcp.Meta) (string, bool, error) {
	v, ok := meta[MetaIdempotencyKey]
	if !ok {
		return "", false, nil
	}
	s, isString := v.(string)
	if !isString {
		return "", true, fmt.Errorf("_meta %q must be a string", MetaIdempotencyKey)
	}
	// The ledger's rule, checked here too: gRPC itself refuses a metadata
	// value with control characters before the ledger could name it.
	if len(s) < 1 || len(s) > 255 {
		return "", true, fmt.Errorf("_meta %q must be 1 to 255 characters", MetaIdempotencyKey)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return "", true, fmt.Errorf("_meta %q must be printable ASCII", MetaIdempotencyKey)
		}
	}
	return s, true, nil
}

// sessionKeys gives each MCP session a random identifier for DeriveKey,
// kept while the session lives. Over stdio the session is the connection
// (the gateway process); over streamable HTTP it is the Mcp-Session-Id
// session, which the gateway keeps until the client ends it or it idles out.
type sessionKeys struct {
	mu  sync.Mutex
	ids map[*mcp.ServerSession]string
}

func newSessionKeys() *sessionKeys {
	return &sessionKeys{ids: map[*mcp.ServerSession]string{}}
}

// of returns ss's identifier, creating it on the session's first call; the
// entry is dropped when the session ends.
func (k *sessionKeys) of(ss *mcp.ServerSession) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if id, ok := k.ids[ss]; ok {
		return id
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	k.ids[ss] = id
	if ss != nil {
		go func() {
			_ = ss.Wait()
			k.mu.Lock()
			delete(k.ids, ss)
			k.mu.Unlock()
		}()
	}
	return id
}
