package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
)

// Error is a refusal the caller can act on: a reason from the API's
// ErrorReason enum, a message for people, and optional specifics. The
// server's error mapper turns it into a gRPC status; nothing below the
// server builds status errors.
type Error struct {
	Reason  opledgerv1.ErrorReason
	Message string
	// Field names the offending request field, for BadRequest details.
	Field string
	// Violations lists argument schema violations (JSON pointer → problem).
	Violations []Violation
	// RetryAfter, when set, tells the caller when a retry may succeed.
	RetryAfter time.Duration
	// Metadata is copied into the ErrorInfo.
	Metadata map[string]string
	// Err is the underlying cause, for logs only.
	Err error
	// Logged says the failure was logged where it happened (bug, an
	// outcome's lost write): the server does not log it again.
	Logged bool
}

// Violation is one way a request is malformed.
type Violation struct {
	Field       string
	Description string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Reason, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Reason, e.Message)
}

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

func refuse(r opledgerv1.ErrorReason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

func notFound(id string) *Error {
	return refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND, "no operation %q in your tenant", truncateText(id, 64))
}

// checkID refuses an id that no operation can have as not found, like any
// other id the caller cannot see, before the database is asked: the
// console's paths reach the ledger without the server's request check, and
// PostgreSQL refuses text with a NUL character or bytes that are not UTF-8.
func checkID(id string) error {
	if ValidOperationID(id) {
		return nil
	}
	return notFound(id)
}

// storeErr turns an unexpected store error into a ledger error: an
// unavailable database is the caller's cue to retry; anything else is
// internal.
func storeErr(err error) error {
	var le *Error
	if errors.As(err, &le) {
		return err
	}
	// A statement that ran out of its own time bound (a lock wait, a slow
	// database) may succeed if sent again, as retryableStoreErr says.
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_LEDGER_UNAVAILABLE,
			Message: "the ledger database is unavailable; retry with the same request", RetryAfter: time.Second, Err: err}
	}
	return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_INTERNAL, Message: "internal error", Err: err}
}

// bug answers a defect of the ledger itself, such as a statement for an
// edge the state table (state.go) does not list: no caller's input can
// reach one, so it is never an answer to a request. Under `go test` it
// panics, so that the test which finds it fails there and then; in
// production it logs one "bug" line and answers INTERNAL, which the server
// does not log again (Error.Logged).
func (l *Ledger) bug(err error) error {
	if testing.Testing() {
		panic(fmt.Sprintf("ledger: bug: %v", err))
	}
	l.logger.Error("bug", "error", err)
	return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_INTERNAL, Message: "internal error", Err: err, Logged: true}
}

// logged marks a ledger error as logged where it happened (Error.Logged).
func logged(err error) error {
	var le *Error
	if errors.As(err, &le) {
		le.Logged = true
	}
	return err
}

// retryableStoreErr reports whether a failed statement may succeed if sent
// again: the database was unreachable (a restart, a failover), a
// serialization failure, or the statement timed out.
func retryableStoreErr(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrRetry) || errors.Is(err, context.DeadlineExceeded)
}

// storable refuses a text a caller gives the ledger to keep (a reason, a
// note, a reference) that the stored bound would change
// (executor.BoundText): one PostgreSQL cannot store (a text value is UTF-8
// and never holds the NUL character, U+0000; gRPC's strings are UTF-8
// already, the console's forms need not be), or one longer than
// executor.MaxStoredText bytes, which every read of the operation would
// carry. A caller's words are refused, never stored cut. It runs before
// anything is read or written, so a refused call changes nothing.
func storable(field, s string) error {
	if executor.BoundText(s) == s {
		return nil
	}
	if len(s) > executor.MaxStoredText && strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: field,
			Message: fmt.Sprintf("%s must be at most %d bytes (it has %d)", field, executor.MaxStoredText, len(s))}
	}
	return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: field,
		Message: field + " must be UTF-8 text without the NUL character (U+0000)"}
}
