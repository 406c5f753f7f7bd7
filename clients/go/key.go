package client

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// KeyPrefix starts every key DeriveKey returns; it names the derivation, so a
// future change gets a new prefix instead of silently new keys.
const KeyPrefix = "opk1-"

// maxRound is the largest round that is exact as an IEEE-754 double, which
// is how JSON numbers are compared across languages.
const maxRound = 1<<53 - 1

// KeyParts identifies one tool call of an agent for DeriveKey.
//
// A provider's tool-call id alone is not a business identity: a regenerated
// model response (a retried round, another provider) may carry a new id for
// the same intended action, and ids are unique only within one response.
// Conversation must be your own durable id for the unit of work (an
// operation, ticket or conversation id that survives restarts) and Round the
// model round within it; persist the key before calling Prepare.
type KeyParts struct {
	// Conversation is your durable id of the conversation or operation.
	// Required.
	Conversation string
	// Round is the model round (turn) within the conversation, 0 ≤ Round <
	// 2^53.
	Round int64
	// ToolCall is the tool-call id the model gave this call, or "" when
	// your runtime has not pinned the model's response (then Conversation
	// and Round alone must tell the calls apart).
	ToolCall string
	// Tool is the tool's name. Required.
	Tool string
	// ToolVersion is the tool version you send in PrepareRequest, or "".
	ToolVersion string
}

// DeriveKey returns the idempotency key of a tool call: "opk1-" followed by
// the unpadded base64url SHA-256 of the RFC 8785 canonical JSON of
// {"conversation","round","tool_call","tool","tool_version"}; always 48
// printable ASCII characters. Every opledger client (Go, Java, Python,
// TypeScript) derives the same key from the same parts; see
// docs/fingerprint.md, "Idempotency key derivation".
func DeriveKey(p KeyParts) (string, error) {
	switch {
	case p.Conversation == "":
		return "", errors.New("opledger: DeriveKey: empty conversation")
	case p.Tool == "":
		return "", errors.New("opledger: DeriveKey: empty tool")
	case p.Round < 0 || p.Round > maxRound:
		return "", errors.New("opledger: DeriveKey: round must be in [0, 2^53)")
	}
	pre, err := KeyPreimage(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pre)
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// KeyPreimage returns the canonical JSON bytes DeriveKey hashes, for
// checking another implementation against this one.
func KeyPreimage(p KeyParts) ([]byte, error) {
	return fingerprint.Canonicalize(map[string]any{
		"conversation": p.Conversation,
		"round":        float64(p.Round),
		"tool_call":    p.ToolCall,
		"tool":         p.Tool,
		"tool_version": p.ToolVersion,
	})
}
