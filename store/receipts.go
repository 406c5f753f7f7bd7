package store

import (
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/audit"
)

// eventDoc is what a statement that writes an event needs of its receipt
// (migration 0017): the doc hash of the event (audit.DocHash: its actor,
// detail, facts, operation, to state and type, which the caller knows),
// built here so that PostgreSQL only links it to the chain, and its facts'
// JCS text as the event stores them. facts come in JCS order
// (audit.DocHashFacts), every key of the event's kind listed, null or not.
// With receipts off (Config.NoReceipts) both are NULL and the statement
// writes no chain.
func (c *Conn) eventDoc(op, typ, actor, to, detail string, facts []audit.Fact) ([]byte, pgtype.Text, error) {
	if c.noReceipts {
		return nil, pgtype.Text{}, nil
	}
	doc, ft, err := audit.DocHashFacts(audit.Event{OperationID: op, Type: typ, Actor: actor, ToState: to, Detail: detail}, facts)
	if err != nil {
		return nil, pgtype.Text{}, fmt.Errorf("store: operation %s: event: %w", op, err)
	}
	return doc, pgtype.Text{String: ft, Valid: ft != ""}, nil
}

// digest is audit.Digest of doc, skipped with receipts off (nothing records it).
func (c *Conn) digest(doc []byte) (string, error) {
	if c.noReceipts {
		return "", nil
	}
	return audit.Digest(doc)
}

// str is a fact that is always set; opt one that is NULL when empty, as
// text() stores it.
func str(k, v string) audit.Fact { return audit.Fact{Key: k, Value: v} }

func opt(k, v string) audit.Fact { return audit.Fact{Key: k, Value: v, Null: v == ""} }

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// TakeOverDetail is the detail OperationTakeOver's event carries, a
// constant of the statement that the event's doc hash covers.
const TakeOverDetail = "lease expired; previous holder fenced out"
