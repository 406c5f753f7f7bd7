package interceptors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/reason"
)

// Principal is an authenticated caller: one tenant, one or more roles.
type Principal struct {
	ID     string
	Tenant string
	Name   string
	Roles  []string
}

// HasRole reports whether the principal holds role.
func (p Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// ErrBadCredentials is what an Authenticator returns for an unknown, revoked
// or malformed key; anything else is treated as the ledger being unavailable.
var ErrBadCredentials = errors.New("interceptors: bad credentials")

// Authenticator resolves an API key to its principal.
type Authenticator interface {
	Authenticate(ctx context.Context, apiKey string) (Principal, error)
}

type principalKey struct{}

// PrincipalFrom returns the principal the auth interceptor found for the
// call, or the one WithPrincipal put in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	if c := callFrom(ctx); c != nil && c.authenticated {
		return c.principal, true
	}
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p; for tests and in-process callers.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// authFunc authenticates the bearer key and checks that the principal has one
// of the roles the method allows. Methods absent from roles are refused, so a
// new RPC is closed until someone decides who may call it.
func authFunc(a Authenticator, roles map[string][]string) func(ctx context.Context) (context.Context, error) {
	return func(ctx context.Context) (context.Context, error) {
		method, _ := grpc.Method(ctx)
		vals := metadata.ValueFromIncomingContext(ctx, "authorization")
		if len(vals) > 1 {
			// Two credentials are ambiguous: whichever one was used, the
			// caller could not tell which principal acted.
			return nil, reason.Status(opledgerv1.ErrorReason_ERROR_REASON_API_KEY_INVALID,
				fmt.Sprintf("'authorization' was sent %d times; send it once", len(vals)), nil)
		}
		scheme, key, found := "", "", false
		if len(vals) == 1 {
			scheme, key, found = strings.Cut(vals[0], " ")
		}
		if !found || !strings.EqualFold(scheme, "bearer") {
			return nil, reason.Status(opledgerv1.ErrorReason_ERROR_REASON_API_KEY_MISSING,
				"missing 'authorization: Bearer <api key>' metadata", nil)
		}
		p, err := a.Authenticate(ctx, key)
		if errors.Is(err, ErrBadCredentials) {
			return nil, reason.Status(opledgerv1.ErrorReason_ERROR_REASON_API_KEY_INVALID,
				"the API key is not valid", nil)
		}
		if err != nil {
			return nil, reason.Status(opledgerv1.ErrorReason_ERROR_REASON_LEDGER_UNAVAILABLE,
				"could not check the API key; retry", nil)
		}
		allowed := roles[method]
		if !slices.ContainsFunc(allowed, p.HasRole) {
			return nil, reason.Status(opledgerv1.ErrorReason_ERROR_REASON_ROLE_REQUIRED,
				roleRequiredMessage(method, allowed, p.Roles), map[string]string{"method": method})
		}
		if c := callFrom(ctx); c != nil {
			c.principal, c.authenticated = p, true
			return ctx, nil
		}
		return WithPrincipal(ctx, p), nil
	}
}

// roleRequiredMessage tells a caller which role a method needs and which
// roles their key has, e.g. "Approve needs a key with the approver role;
// this key has the agent role".
func roleRequiredMessage(method string, allowed, held []string) string {
	name := method[strings.LastIndex(method, "/")+1:]
	if len(allowed) == 0 {
		return name + " is not open to any role"
	}
	has := "no role"
	switch len(held) {
	case 0:
	case 1:
		has = "the " + held[0] + " role"
	default:
		has = "the " + joinWords(held, "and") + " roles"
	}
	return fmt.Sprintf("%s needs a key with the %s role; this key has %s", name, joinWords(allowed, "or"), has)
}

// joinWords joins words as in English: "a", "a or b", "a, b or c".
func joinWords(words []string, conj string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}
