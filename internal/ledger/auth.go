package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger/store"
)

// The roles a principal may hold.
const (
	RoleAgent    = "agent"
	RoleApprover = "approver"
	RoleOperator = "operator"
)

// Roles lists every role.
var Roles = []string{RoleAgent, RoleApprover, RoleOperator}

// Actor is the authenticated principal on whose behalf the ledger acts.
type Actor struct {
	ID, Tenant, Name string
	Roles            []string
}

func (a Actor) has(role string) bool { return slices.Contains(a.Roles, role) }

// DefaultAuthCacheTTL is Config.AuthCacheTTL's default: how long a replica
// may keep accepting a key after it was revoked.
const DefaultAuthCacheTTL = 30 * time.Second

// authCache keeps recently authenticated keys off the database's hot path,
// by their hash: the key itself is never kept.
type authCache struct {
	mu      sync.Mutex
	entries map[keyHash]authEntry
}

type authEntry struct {
	actor   Actor
	ok      bool
	expires time.Time
}

// ErrBadKey is returned by Authenticate for unknown or revoked keys.
var ErrBadKey = errors.New("ledger: unknown or revoked API key")

// Authenticate resolves an API key to its actor. Results (including
// refusals, briefly) are cached per key hash.
func (l *Ledger) Authenticate(ctx context.Context, key string) (Actor, error) {
	hk := hashAPIKey(key)
	now := time.Now()
	l.auth.mu.Lock()
	e, hit := l.auth.entries[hk]
	l.auth.mu.Unlock()
	if hit && now.Before(e.expires) {
		if !e.ok {
			return Actor{}, ErrBadKey
		}
		return e.actor, nil
	}
	p, err := l.store.PrincipalByKeyHash(ctx, hk[:])
	var entry authEntry
	switch {
	case errors.Is(err, store.ErrNotFound):
		entry = authEntry{ok: false, expires: now.Add(2 * time.Second)}
	case err != nil:
		return Actor{}, storeErr(err)
	default:
		entry = authEntry{actor: Actor{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Roles: p.Roles}, ok: true, expires: now.Add(l.cfg.AuthCacheTTL)}
	}
	l.auth.mu.Lock()
	if len(l.auth.entries) > 10000 {
		l.auth.entries = map[keyHash]authEntry{}
	}
	l.auth.entries[hk] = entry
	l.auth.mu.Unlock()
	if !entry.ok {
		return Actor{}, ErrBadKey
	}
	return entry.actor, nil
}

// Principal is an API key's owner.
type Principal = store.Principal

// CreatePrincipal creates a principal and returns its new API key, which is
// shown once and never stored.
func CreatePrincipal(ctx context.Context, st *store.Store, tenant, name string, roles []string) (key string, p Principal, err error) {
	if tenant == "" || len(tenant) > 64 {
		return "", p, errors.New("ledger: tenant must be 1 to 64 characters")
	}
	if len(roles) == 0 {
		return "", p, errors.New("ledger: at least one role is needed")
	}
	for _, r := range roles {
		if !slices.Contains(Roles, r) {
			return "", p, fmt.Errorf("ledger: unknown role %q (want agent, approver or operator)", r)
		}
	}
	key, hash, prefix := NewAPIKey()
	id := newID("pr_")
	if name == "" {
		name = id
	}
	p, err = st.PrincipalCreate(ctx, store.Principal{ID: id, Tenant: tenant, Name: name, Roles: roles, KeyPrefix: prefix}, hash)
	if errors.Is(err, store.ErrAlreadyExists) {
		return "", p, fmt.Errorf("ledger: tenant %q already has a principal named %q", tenant, name)
	}
	return key, p, err
}

// ListPrincipals returns a tenant's principals, revoked ones included,
// oldest first. Keys are never stored, so none can be listed.
func ListPrincipals(ctx context.Context, st *store.Store, tenant string) ([]Principal, error) {
	if tenant == "" {
		return nil, errors.New("ledger: a tenant is required")
	}
	return st.PrincipalList(ctx, tenant)
}

// RevokePrincipal revokes the key of the tenant's principal ref names (by
// ID or by Name). Revoking twice is harmless: already reports that the key
// was revoked before, at p.RevokedAt. Servers stop accepting the key within
// their auth cache TTL.
func RevokePrincipal(ctx context.Context, st *store.Store, tenant string, ref store.PrincipalRef) (p Principal, already bool, err error) {
	if tenant == "" {
		return p, false, errors.New("ledger: a tenant is required")
	}
	if (ref.ID == "") == (ref.Name == "") {
		return p, false, errors.New("ledger: name the principal by its id or by its name, not both")
	}
	p, err = st.PrincipalRevoke(ctx, tenant, ref)
	if !errors.Is(err, store.ErrNotFound) {
		return p, false, err
	}
	p, err = st.PrincipalGet(ctx, tenant, ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		what := "named " + strconv.Quote(ref.Name)
		if ref.ID != "" {
			what = "with id " + strconv.Quote(ref.ID)
		}
		return p, false, fmt.Errorf("ledger: tenant %q has no principal %s", tenant, what)
	case err != nil:
		return p, false, err
	case p.RevokedAt.IsZero():
		// Nothing clears revoked_at, so an unrevoked row here was created
		// under this name after the UPDATE looked: report it, do not guess.
		return p, false, fmt.Errorf("ledger: principal %s changed while revoking; run the command again", p.ID)
	}
	return p, true, nil
}
