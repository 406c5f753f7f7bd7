package store

import (
	"context"
	"time"

	"github.com/opledger/opledger/store/internal/db"
)

// Session is a live console session: the principal it acts as and the
// CSRF token its forms must carry.
type Session struct {
	Principal Principal
	CSRFToken string
	ExpiresAt time.Time
}

// SessionLifetime bounds a console session: it ends after Idle without
// use, and after Max whatever happens.
type SessionLifetime struct {
	Idle, Max time.Duration
}

// ConsoleSessionCreate stores a session for principalID under the SHA-256
// of its token (idHash), and deletes expired sessions.
func (c *Conn) ConsoleSessionCreate(ctx context.Context, idHash []byte, principalID, csrfToken string, l SessionLifetime) error {
	return interpretError(c.q.ConsoleSessionCreate(ctx, c.dbtx, db.ConsoleSessionCreateParams{
		IDHash: idHash, PrincipalID: principalID, CsrfToken: csrfToken, IdleSeconds: min(l.Idle, l.Max).Seconds(),
	}))
}

// ConsoleSessionTouch returns the live session stored under idHash and,
// with extend, extends it; ErrNotFound means none (unknown, expired, or its
// principal was revoked).
func (c *Conn) ConsoleSessionTouch(ctx context.Context, idHash []byte, l SessionLifetime, extend bool) (Session, error) {
	r, err := c.q.ConsoleSessionTouch(ctx, c.dbtx, db.ConsoleSessionTouchParams{
		IDHash: idHash, IdleSeconds: l.Idle.Seconds(), MaxSeconds: l.Max.Seconds(), Extend: extend,
	})
	if err != nil {
		return Session{}, interpretError(err)
	}
	return Session{Principal: Principal{ID: r.ID, Tenant: r.Tenant, Name: r.Name, Roles: r.Roles},
		CSRFToken: r.CsrfToken, ExpiresAt: r.ExpiresAt.Time}, nil
}

// ConsoleSessionDelete ends the session stored under idHash.
func (c *Conn) ConsoleSessionDelete(ctx context.Context, idHash []byte) error {
	return interpretError(c.q.ConsoleSessionDelete(ctx, c.dbtx, idHash))
}

// Notification is an approval notification handed to a dispatcher.
type Notification struct {
	OperationID string
	// Seq is the event that started the wait; with OperationID it names
	// the notification.
	Seq int32
	// Reason is "prepared" or "approval_expired".
	Reason string
	// Attempts counts claims, this one included.
	Attempts  int32
	CreatedAt time.Time
	// DBNow is the database's clock at the claim: a notification's age is
	// DBNow - CreatedAt, both on that clock.
	DBNow time.Time
	// Tenant and State are the operation's, as of the claim.
	Tenant, State string
}

// ApprovalNotificationClaim claims up to batch due notifications for lease.
func (c *Conn) ApprovalNotificationClaim(ctx context.Context, batch int32, lease time.Duration) ([]Notification, error) {
	rows, err := c.q.ApprovalNotificationClaim(ctx, c.dbtx, db.ApprovalNotificationClaimParams{BatchSize: batch, LeaseSeconds: lease.Seconds()})
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]Notification, len(rows))
	for i, r := range rows {
		out[i] = Notification{OperationID: r.OperationID, Seq: r.Seq, Reason: r.Reason, Attempts: r.Attempts,
			CreatedAt: r.CreatedAt.Time, DBNow: r.DbNow.Time, Tenant: r.Tenant, State: r.State}
	}
	return out, nil
}

// ApprovalNotificationDelete removes a notification that was delivered (or
// given up).
func (c *Conn) ApprovalNotificationDelete(ctx context.Context, operationID string, seq int32) error {
	return interpretError(c.q.ApprovalNotificationDelete(ctx, c.dbtx, db.ApprovalNotificationDeleteParams{OperationID: operationID, Seq: seq}))
}

// ApprovalNotificationRetry schedules n's next attempt after backoff,
// unless another dispatcher claimed it since.
func (c *Conn) ApprovalNotificationRetry(ctx context.Context, n Notification, backoff time.Duration, lastError string) error {
	return interpretError(c.q.ApprovalNotificationRetry(ctx, c.dbtx, db.ApprovalNotificationRetryParams{
		OperationID: n.OperationID, Seq: n.Seq, Attempts: n.Attempts, BackoffSeconds: backoff.Seconds(), LastError: text(lastError),
	}))
}
