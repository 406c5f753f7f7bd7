package store

import (
	"context"
	"time"

	"github.com/opledger/opledger/store/internal/db"
)

// Principal is an API key's owner. The key itself is never stored: only
// its SHA-256 and a short prefix for people to recognise it by.
type Principal struct {
	ID, Tenant, Name string
	Roles            []string
	KeyPrefix        string
	CreatedAt        time.Time
}

// PrincipalCreate stores a principal with the hash of its key.
// ErrAlreadyExists means the (tenant, name) pair is taken.
func (c *Conn) PrincipalCreate(ctx context.Context, p Principal, keyHash []byte) (Principal, error) {
	r, err := c.q.PrincipalCreate(ctx, c.dbtx, db.PrincipalCreateParams{
		ID: p.ID, Tenant: p.Tenant, Name: p.Name, Roles: p.Roles, KeyHash: keyHash, KeyPrefix: p.KeyPrefix,
	})
	if err != nil {
		return Principal{}, interpretError(err)
	}
	return principalFromDB(r), nil
}

// PrincipalByKeyHash finds the unrevoked principal whose key hashes to h.
func (c *Conn) PrincipalByKeyHash(ctx context.Context, h []byte) (Principal, error) {
	r, err := c.q.PrincipalByKeyHash(ctx, c.dbtx, h)
	if err != nil {
		return Principal{}, interpretError(err)
	}
	return principalFromDB(r), nil
}

func principalFromDB(r db.Principal) Principal {
	return Principal{ID: r.ID, Tenant: r.Tenant, Name: r.Name, Roles: r.Roles, KeyPrefix: r.KeyPrefix, CreatedAt: r.CreatedAt.Time}
}
