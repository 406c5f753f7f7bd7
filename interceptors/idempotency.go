package interceptors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/reason"
)

// IdempotencyKeyHeader is the gRPC metadata key carrying the caller's
// idempotency key.
const IdempotencyKeyHeader = "idempotency-key"

// MaxIdempotencyKeyLen bounds the key; longer keys are refused, never cut.
const MaxIdempotencyKeyLen = 255

// Idempotency is what the idempotency interceptor hands to the handler.
type Idempotency struct {
	// Key is the raw key. Never log it; log Digest.
	Key string
	// Digest identifies the key in logs without revealing it.
	Digest string
}

type idempotencyKey struct{}

// IdempotencyFrom returns what the idempotency interceptor put in ctx.
func IdempotencyFrom(ctx context.Context) (Idempotency, bool) {
	v, ok := ctx.Value(idempotencyKey{}).(Idempotency)
	return v, ok
}

// WithIdempotency returns ctx carrying v; for in-process callers and tests.
func WithIdempotency(ctx context.Context, v Idempotency) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, v)
}

// KeyDigest is the form in which an idempotency key may appear in logs: the
// first 16 hex digits of its SHA-256.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// ValidateKey checks the idempotency-key metadata values: exactly one value,
// 1 to 255 printable ASCII characters (0x21 to 0x7e plus space inside).
func ValidateKey(values []string) (string, error) {
	if len(values) == 0 {
		return "", reason.Status(opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_MISSING,
			"this method needs an 'idempotency-key' metadata entry", nil)
	}
	if len(values) > 1 {
		return "", keyInvalid(fmt.Sprintf("'idempotency-key' was sent %d times; send it once", len(values)))
	}
	k := values[0]
	if k == "" {
		return "", keyInvalid("'idempotency-key' is empty")
	}
	if len(k) > MaxIdempotencyKeyLen {
		return "", keyInvalid(fmt.Sprintf("'idempotency-key' is %d bytes; at most %d are allowed", len(k), MaxIdempotencyKeyLen))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", keyInvalid(fmt.Sprintf("'idempotency-key' has a byte outside printable ASCII at offset %d", i))
		}
	}
	if k[0] == ' ' || k[len(k)-1] == ' ' {
		return "", keyInvalid("'idempotency-key' starts or ends with a space")
	}
	return k, nil
}

func keyInvalid(msg string) error {
	return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_INVALID, msg, nil,
		reason.FieldViolation("metadata.idempotency-key", msg))
}

// idempotencyUnary validates the key's presence and form on every method
// that receives one, and requires it where required[method]. What the key
// identifies (the tool, the fingerprint of the request) is the ledger's to
// decide.
func idempotencyUnary(required map[string]bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// One key's values, not a copy of all the metadata.
		values := metadata.ValueFromIncomingContext(ctx, IdempotencyKeyHeader)
		if len(values) == 0 && !required[info.FullMethod] {
			return handler(ctx, req)
		}
		key, err := ValidateKey(values)
		if err != nil {
			return nil, err
		}
		v := Idempotency{Key: key, Digest: KeyDigest(key)}
		if c := callFrom(ctx); c != nil {
			c.keyDigest = v.Digest
		}
		return handler(WithIdempotency(ctx, v), req)
	}
}

// idempotencyStream validates the key metadata of streaming calls; a stream
// has no single request to fingerprint.
func idempotencyStream(required map[string]bool) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		values := metadata.ValueFromIncomingContext(ss.Context(), IdempotencyKeyHeader)
		if len(values) == 0 && !required[info.FullMethod] {
			return handler(srv, ss)
		}
		if _, err := ValidateKey(values); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
