package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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

// The lengths of a tenant and of a principal's name, in bytes.
const (
	maxTenantBytes        = 64
	maxPrincipalNameBytes = 128
)

// Invisible reports whether r, following prev (0 at the start), is a
// character a person reading a screen could not see, or that could reorder
// the text around it: controls, format characters (zero-width spaces, bidi
// overrides), every space but U+0020, unassigned and private-use code
// points, Unicode's default-ignorable code points (Hangul fillers, the
// combining grapheme joiner) and the blank Braille pattern. A variation
// selector is seen as part of the character before it ("❤️", "1️⃣", "ℹ️", an
// ideographic variant), so one directly after a character that has
// variants (a visible symbol or punctuation mark beyond ASCII, an
// ideograph or a letter of the scripts with standardized variants, a digit,
// # or *) is not invisible; a stray one, one after any other letter ("Zoë"
// and "Zoë" with a selector look the same), or a run of them (text
// smuggled in selectors) is. Approvers read operations' arguments and
// principals' names through it: what they see must be what runs.
func Invisible(prev, r rune) bool {
	if r == ' ' {
		return false
	}
	if unicode.Is(unicode.Variation_Selector, r) {
		base := prev >= '0' && prev <= '9' || prev == '#' || prev == '*' || prev == '\u2139' ||
			prev >= 0x80 && (unicode.IsSymbol(prev) || unicode.IsPunct(prev) || unicode.Is(unicode.Ideographic, prev) ||
				unicode.In(prev, unicode.Han, unicode.Mongolian, unicode.Myanmar, unicode.Phags_Pa, unicode.Manichaean, unicode.Egyptian_Hieroglyphs))
		return !base || unicode.Is(unicode.Variation_Selector, prev) || Invisible(0, prev)
	}
	return !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) || unicode.Is(unicode.Co, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || r == '\u2800'
}

// hasInvisible reports whether s holds a character Invisible names.
func hasInvisible(s string) bool {
	var prev rune
	for _, r := range s {
		if Invisible(prev, r) {
			return true
		}
		prev = r
	}
	return false
}

// principalText refuses a tenant or a principal's name that is not short,
// printable UTF-8 text: bytes that are not UTF-8 cannot be stored, and a
// control or formatting character (a newline, a right-to-left override, a
// zero-width space) would reach approvers' screens, where these names are
// shown, as it is. An empty value passes unless required. (A new
// principal's name is held to Invisible too: CreatePrincipal.)
func principalText(what, s string, maxBytes int, required bool) error {
	bad := len(s) > maxBytes || (required && s == "") || !utf8.ValidString(s)
	for _, r := range s {
		if bad {
			break
		}
		bad = unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	}
	if bad {
		req := "at most"
		if required {
			req = "1 to"
		}
		return fmt.Errorf("ledger: %s must be %s %d bytes of printable UTF-8 text (no control or formatting characters): %q", what, req, maxBytes, truncateText(s, 80))
	}
	return nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// CreatePrincipal creates a principal and returns its new API key, which is
// shown once and never stored.
func CreatePrincipal(ctx context.Context, st *store.Store, tenant, name string, roles []string) (key string, p Principal, err error) {
	if err := principalText("tenant", tenant, maxTenantBytes, true); err != nil {
		return "", p, err
	}
	if err := principalText("name", name, maxPrincipalNameBytes, false); err != nil {
		return "", p, err
	}
	if hasInvisible(name) {
		// Approvers read it (the console's "prepared by", the event log):
		// what they see must be the name. Existing names are still found
		// by the other commands, and shown escaped.
		return "", p, fmt.Errorf("ledger: name must be visible text: no invisible character and no space but U+0020 (found one in %+q)", truncateText(name, 80))
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
	if err := principalText("tenant", tenant, maxTenantBytes, true); err != nil {
		return nil, err
	}
	return st.PrincipalList(ctx, tenant)
}

// RevokePrincipal revokes the key of the tenant's principal ref names (by
// ID or by Name). Revoking twice is harmless: already reports that the key
// was revoked before, at p.RevokedAt. Servers stop accepting the key within
// their auth cache TTL.
func RevokePrincipal(ctx context.Context, st *store.Store, tenant string, ref store.PrincipalRef) (p Principal, already bool, err error) {
	if err := principalText("tenant", tenant, maxTenantBytes, true); err != nil {
		return p, false, err
	}
	if (ref.ID == "") == (ref.Name == "") {
		return p, false, errors.New("ledger: name the principal by its id or by its name, not both")
	}
	if err := principalText("name", ref.Name, maxPrincipalNameBytes, false); err != nil {
		return p, false, err
	}
	if err := principalText("id", ref.ID, maxPrincipalNameBytes, false); err != nil {
		return p, false, err
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

// PrincipalOfKey resolves an API key outside a server, for a command that
// acts on a tenant's behalf (opledger audit export, with an operator key of
// the tenant). Unknown or revoked keys are ErrBadKey.
func PrincipalOfKey(ctx context.Context, st *store.Store, key string) (Principal, error) {
	hk := hashAPIKey(key)
	p, err := st.PrincipalByKeyHash(ctx, hk[:])
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, ErrBadKey
	}
	return p, err
}
