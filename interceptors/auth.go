package interceptors

import (
	"context"
	"errors"
	"slices"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
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

// PrincipalFrom returns the principal the auth interceptor put in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
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
		key, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, Status(codes.Unauthenticated, opledgerv1.ErrorReason_ERROR_REASON_API_KEY_MISSING,
				"missing 'authorization: Bearer <api key>' metadata", nil)
		}
		p, err := a.Authenticate(ctx, key)
		if errors.Is(err, ErrBadCredentials) {
			return nil, Status(codes.Unauthenticated, opledgerv1.ErrorReason_ERROR_REASON_API_KEY_INVALID,
				"the API key is not valid", nil)
		}
		if err != nil {
			return nil, Status(codes.Unavailable, opledgerv1.ErrorReason_ERROR_REASON_LEDGER_UNAVAILABLE,
				"could not check the API key; retry", nil)
		}
		allowed := roles[method]
		if !slices.ContainsFunc(allowed, p.HasRole) {
			return nil, Status(codes.PermissionDenied, opledgerv1.ErrorReason_ERROR_REASON_ROLE_REQUIRED,
				"this method needs one of the roles "+joinRoles(allowed), map[string]string{"method": method})
		}
		cl := callLogFrom(ctx)
		cl.tenant, cl.principal = p.Tenant, p.ID
		return WithPrincipal(ctx, p), nil
	}
}

func joinRoles(r []string) string {
	if len(r) == 0 {
		return "(none)"
	}
	s := r[0]
	for _, x := range r[1:] {
		s += ", " + x
	}
	return s
}
