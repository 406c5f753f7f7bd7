package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/opledger/opledger/store"
)

// Get returns an operation of the actor's tenant and, when asked, its
// events.
func (l *Ledger) Get(ctx context.Context, a Actor, id string, withEvents bool) (Operation, []OperationEvent, error) {
	if err := checkID(id); err != nil {
		return Operation{}, nil, err
	}
	asked := time.Now()
	op, err := l.store.OperationGet(ctx, a.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Operation{}, nil, notFound(id)
	}
	if err != nil {
		return Operation{}, nil, storeErr(err)
	}
	l.remember(op, asked)
	if !withEvents {
		return op, nil, nil
	}
	evs, err := l.store.OperationEvents(ctx, op.ID)
	if err != nil {
		return Operation{}, nil, storeErr(err)
	}
	return op, evs, nil
}
