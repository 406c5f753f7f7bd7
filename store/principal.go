package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/store/internal/db"
)

// Principal is an API key's owner. The key itself is never stored: only
// its SHA-256 and a short prefix for people to recognise it by.
type Principal struct {
	ID, Tenant, Name string
	Roles            []string
	KeyPrefix        string
	CreatedAt        time.Time
	// RevokedAt is when the key was revoked; zero while it is valid.
	RevokedAt time.Time
}

// PrincipalRef names one principal of a tenant by its ID or by its Name;
// exactly one of them is set.
type PrincipalRef struct{ ID, Name string }

func (r PrincipalRef) params() (id, name pgtype.Text) {
	return pgtype.Text{String: r.ID, Valid: r.ID != ""}, pgtype.Text{String: r.Name, Valid: r.Name != ""}
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

// PrincipalList returns a tenant's principals, revoked ones included,
// oldest first.
func (c *Conn) PrincipalList(ctx context.Context, tenant string) ([]Principal, error) {
	rows, err := c.q.PrincipalList(ctx, c.dbtx, tenant)
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]Principal, len(rows))
	for i, r := range rows {
		out[i] = principalFromDB(r)
	}
	return out, nil
}

// PrincipalGet returns the tenant's principal ref names, revoked or not;
// ErrNotFound if there is none.
func (c *Conn) PrincipalGet(ctx context.Context, tenant string, ref PrincipalRef) (Principal, error) {
	id, name := ref.params()
	r, err := c.q.PrincipalGet(ctx, c.dbtx, db.PrincipalGetParams{Tenant: tenant, ID: id, Name: name})
	if err != nil {
		return Principal{}, interpretError(err)
	}
	return principalFromDB(r), nil
}

// PrincipalRevoke revokes the tenant's principal ref names and returns it.
// ErrNotFound means no unrevoked principal matched: it does not exist or
// was already revoked (a revocation time is never overwritten).
func (c *Conn) PrincipalRevoke(ctx context.Context, tenant string, ref PrincipalRef) (Principal, error) {
	id, name := ref.params()
	r, err := c.q.PrincipalRevoke(ctx, c.dbtx, db.PrincipalRevokeParams{Tenant: tenant, ID: id, Name: name})
	if err != nil {
		return Principal{}, interpretError(err)
	}
	return principalFromDB(r), nil
}

func principalFromDB(r db.Principal) Principal {
	p := Principal{ID: r.ID, Tenant: r.Tenant, Name: r.Name, Roles: r.Roles, KeyPrefix: r.KeyPrefix, CreatedAt: r.CreatedAt.Time}
	if r.RevokedAt.Valid {
		p.RevokedAt = r.RevokedAt.Time
	}
	return p
}
