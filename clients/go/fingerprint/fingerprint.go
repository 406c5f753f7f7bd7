// Package fingerprint computes the versioned fingerprint of an opledger
// operation: a SHA-256 over a published canonical form (RFC 8785 JCS) of
// every input that affects what the operation does. Clients in any language
// can compute the same value; docs/fingerprint.md describes the form and
// testdata/vectors.json holds the vectors they should check against.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// Version is the prefix of fingerprints produced by Compute. A change to
// the canonical form gets a new version (and prefix) so that fingerprints
// already stored with an older prefix stay meaningful.
const Version = "v1"

// versionNumber is the value of the "v" member in the v1 preimage.
const versionNumber = 1

// Input is everything that goes into a v1 fingerprint.
type Input struct {
	// Method is the full gRPC method name, e.g.
	// "/opledger.v1.LedgerService/Prepare".
	Method string
	// Tenant is the tenant the authenticated principal belongs to.
	Tenant string
	// Tool is the tool name.
	Tool string
	// ToolVersion is the resolved tool version (never "" — the server
	// resolves a missing version to the tool's current one first).
	ToolVersion string
	// Args is the JSON object of arguments (see Canonicalize for the
	// accepted Go types); nil means the empty object.
	Args any
}

// Preimage returns the canonical bytes that Compute hashes: the JCS form of
// {"args":…,"method":…,"tenant":…,"tool":…,"tool_version":…,"v":1}.
func Preimage(in Input) ([]byte, error) {
	for _, f := range []struct{ name, value string }{
		{"method", in.Method},
		{"tenant", in.Tenant},
		{"tool", in.Tool},
		{"tool_version", in.ToolVersion},
	} {
		if f.value == "" {
			return nil, fmt.Errorf("fingerprint: %s is empty", f.name)
		}
	}
	args, err := argsObject(in.Args)
	if err != nil {
		return nil, err
	}
	return Canonicalize(map[string]any{
		"args":         args,
		"method":       in.Method,
		"tenant":       in.Tenant,
		"tool":         in.Tool,
		"tool_version": in.ToolVersion,
		"v":            float64(versionNumber),
	})
}

// Compute returns the v1 fingerprint of in: "v1:" followed by the lowercase
// hex SHA-256 of Preimage(in).
func Compute(in Input) (string, error) {
	pre, err := Preimage(in)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pre)
	return Version + ":" + hex.EncodeToString(sum[:]), nil
}

// OfCanonical returns the v1 fingerprint of a request whose args are
// already in canonical form (Canonicalize's output for a JSON object): the
// same value Compute returns for them, without canonicalising the args a
// second time. JCS sorts the preimage's members, so the canonical args are
// its first member and the rest are plain strings.
func OfCanonical(method, tenant, tool, toolVersion string, canonicalArgs []byte) (string, error) {
	for _, f := range []struct{ name, value string }{
		{"method", method},
		{"tenant", tenant},
		{"tool", tool},
		{"tool_version", toolVersion},
	} {
		if f.value == "" {
			return "", fmt.Errorf("fingerprint: %s is empty", f.name)
		}
	}
	if len(canonicalArgs) < 2 || canonicalArgs[0] != '{' {
		return "", errArgsNotObject
	}
	pre := make([]byte, 0, len(canonicalArgs)+len(method)+len(tenant)+len(tool)+len(toolVersion)+64)
	pre = append(pre, `{"args":`...)
	pre = append(pre, canonicalArgs...)
	var err error
	for _, f := range []struct{ name, value string }{
		{`,"method":`, method}, {`,"tenant":`, tenant}, {`,"tool":`, tool}, {`,"tool_version":`, toolVersion},
	} {
		pre = append(pre, f.name...)
		if pre, err = appendString(pre, f.value); err != nil {
			return "", err
		}
	}
	pre = append(pre, `,"v":1}`...)
	sum := sha256.Sum256(pre)
	return Version + ":" + hex.EncodeToString(sum[:]), nil
}

// VersionOf returns the version prefix of a fingerprint ("v1" for
// "v1:…"), or "" when fp has no prefix.
func VersionOf(fp string) string {
	v, _, ok := strings.Cut(fp, ":")
	if !ok {
		return ""
	}
	return v
}

// errArgsNotObject rejects args that are not a JSON object: they travel as a
// google.protobuf.Struct, which can only be an object.
var errArgsNotObject = errors.New("fingerprint: args must be a JSON object")

// argsObject resolves the convenience types Canonicalize accepts far enough
// to check that args is an object, and maps a missing value to {}.
func argsObject(args any) (any, error) {
	if args == nil {
		return map[string]any{}, nil
	}
	switch a := args.(type) {
	case map[string]any:
		return a, nil
	case json.RawMessage:
		v, err := decodeRaw(a)
		if err != nil {
			return nil, err
		}
		return argsObject(v)
	case *structpb.Struct:
		return a, nil
	case *structpb.Value:
		if s, ok := a.GetKind().(*structpb.Value_StructValue); ok {
			return s.StructValue, nil
		}
		if _, ok := a.GetKind().(*structpb.Value_NullValue); ok {
			return map[string]any{}, nil
		}
		return nil, fmt.Errorf("%w, got a google.protobuf.Value of another kind", errArgsNotObject)
	default:
		return nil, fmt.Errorf("%w, got %T", errArgsNotObject, args)
	}
}
