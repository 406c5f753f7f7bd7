package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestInterpretErrorFailoverClasses covers the server's answers during a
// failover that a single test server cannot be made to give on demand:
// each is ErrUnavailable, and a caller's own deadline or a real SQL error
// stays what it is.
func TestInterpretErrorFailoverClasses(t *testing.T) {
	t.Parallel()
	pg := func(code, msg string) error {
		return fmt.Errorf("query: %w", &pgconn.PgError{Severity: "FATAL", Code: code, Message: msg})
	}
	for _, err := range []error{
		pg("57P01", "terminating connection due to administrator command"),
		pg("57P02", "terminating connection because of crash of another server process"),
		pg("57P03", "the database system is starting up"),
		pg("57P03", "the database system is shutting down"),
		pg("57P03", "the database system is not yet accepting connections"),
		pg("53300", "sorry, too many clients already"),
		pg("25006", "cannot execute INSERT in a read-only transaction"),
		pg("08006", "connection failure"),
		pg("08P01", "protocol violation"),
		fmt.Errorf("read: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}),
		fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("write: %w", syscall.EPIPE),
		fmt.Errorf("x: %w", pgconn.ErrConnClosed),
	} {
		require.ErrorIs(t, interpretError(err), ErrUnavailable, "%v", err)
	}
	for _, err := range []error{
		context.DeadlineExceeded,
		context.Canceled,
		pg("42P01", "relation does not exist"),
		pg("23514", "check constraint"),
		errors.New("something else"),
	} {
		require.NotErrorIs(t, interpretError(err), ErrUnavailable, "%v", err)
	}
	require.ErrorIs(t, interpretError(pg("40001", "could not serialize")), ErrRetry)
}
