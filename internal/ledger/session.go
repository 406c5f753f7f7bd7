package ledger

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/opledger/opledger/store"
)

// SessionLifetime bounds a console session: Idle without use, Max in all.
type SessionLifetime = store.SessionLifetime

// ErrNoSession is returned by Session for a token that names no live
// session (unknown, expired, signed out, or its principal was revoked).
var ErrNoSession = errors.New("ledger: no such console session")

// OpenSession starts a console session acting as a, who already
// authenticated with an API key. It returns the session token for the
// browser's cookie (only its SHA-256 is stored, like an API key's) and the
// session's CSRF token. The API key itself is not kept.
func (l *Ledger) OpenSession(ctx context.Context, a Actor, life SessionLifetime) (token, csrf string, err error) {
	token, csrf = randomToken("ops_"), randomToken("")
	if err := l.store.ConsoleSessionCreate(ctx, HashAPIKey(token), a.ID, csrf, life); err != nil {
		return "", "", storeErr(err)
	}
	return token, csrf, nil
}

// Session returns the actor and CSRF token of the live session token names
// and, with extend (a person's request, not a page reloading itself),
// extends its idle expiry; ErrNoSession when there is none.
func (l *Ledger) Session(ctx context.Context, token string, life SessionLifetime, extend bool) (Actor, string, time.Time, error) {
	if token == "" || len(token) > 128 {
		return Actor{}, "", time.Time{}, ErrNoSession
	}
	s, err := l.store.ConsoleSessionTouch(ctx, HashAPIKey(token), life, extend)
	if errors.Is(err, store.ErrNotFound) {
		return Actor{}, "", time.Time{}, ErrNoSession
	}
	if err != nil {
		return Actor{}, "", time.Time{}, storeErr(err)
	}
	p := s.Principal
	return Actor{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Roles: p.Roles}, s.CSRFToken, s.ExpiresAt, nil
}

// CloseSession ends the session token names (signing out).
func (l *Ledger) CloseSession(ctx context.Context, token string) error {
	if err := l.store.ConsoleSessionDelete(ctx, HashAPIKey(token)); err != nil {
		return storeErr(err)
	}
	return nil
}

// Has reports whether the actor holds role.
func (a Actor) Has(role string) bool { return a.has(role) }

func randomToken(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}
