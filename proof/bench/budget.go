package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// The budget scenarios (docs/policy.md, "Budgets and business identity";
// issue 34): execute-one-call's job under a limit and an identity,
// reported as a ratio to execute-one-call in the same run.
const (
	// ScenarioOneCallBudgeted is execute-one-call of a tool with a limit
	// per customer (one of budgetCustomers, drawn at random) and a business
	// identity (a new invoice per call): its insert reserves the share and
	// takes the identity (OperationInsertReserving).
	ScenarioOneCallBudgeted = "one-call-budgeted"
	// ScenarioOneCallTenantLimit is execute-one-call of a tool with one
	// tenant-wide limit: every call reserves its share of the same budget
	// row, so the Prepares queue on its lock (held for the reservation's
	// statement, not for a flush: docs/policy.md).
	ScenarioOneCallTenantLimit = "one-call-tenant-limit"
)

// The budget scenarios' tools and limits. The limits are never reached
// (a refusal would count as an error): they measure the reservation, not
// a refusal. The tenant-wide window is short so that uses leave it during
// a run, and reservations meet expired uses as they would in production.
const (
	budgetedTool       = "bench_charge_budgeted"
	tenantLimitedTool  = "bench_charge_metered"
	budgetCustomers    = 1000
	tenantLimitWindow  = "2s"
	tenantLimitCount   = 10000
	customerLimitCount = 10000
)

// budgetTargets are issue 34's goals: the ratio of each budget scenario to
// execute-one-call at the level the goal names.
var budgetTargets = []struct {
	sc   string
	conc int
	min  float64
	what string
}{
	{ScenarioOneCallBudgeted, TargetConcurrency, 0.85, "a limit per customer and an identity"},
	{ScenarioOneCallTenantLimit, tenantLimitConcurrency, 0.7, "one tenant-wide limit, every call on one budget"},
}

// tenantLimitConcurrency is the level of the tenant-wide limit's goal,
// measured (with execute-one-call, opledger only) whatever the sweep.
const tenantLimitConcurrency = 64

// budgetToolsYAML declares the budget scenarios' tools (bench_charge's
// schema with a customer, and its executor) and their limits.
func budgetToolsYAML(fakepayURL string) string {
	const customer = "        customer_id: {type: string, minLength: 1, maxLength: 64}\n"
	return chargeToolYAML(fakepayURL, budgetedTool, noApproval+"    identity: {key: args.invoice_id, window: 720h}\n", customer) +
		chargeToolYAML(fakepayURL, tenantLimitedTool, noApproval, customer) +
		fmt.Sprintf(`limits:
  - {name: bench_per_customer, tools: [%s], per: args.customer_id, window: 1h, count: %d}
  - {name: bench_tenant, tools: [%s], window: %s, count: %d}
`, budgetedTool, customerLimitCount, tenantLimitedTool, tenantLimitWindow, tenantLimitCount)
}

// budgetOp is one call of a budget scenario: a one-call Prepare of a new
// invoice (a new identity) for a random customer. Its args are built as
// directly as execute-one-call's are reused, so that the load generator
// costs each side of the ratio about the same.
func budgetOp(cl *clients, sc string) opFunc {
	name := budgetedTool
	if sc == ScenarioOneCallTenantLimit {
		name = tenantLimitedTool
	}
	return func(ctx context.Context, w, _ int) error {
		key := newKey("l")
		args := &structpb.Struct{Fields: map[string]*structpb.Value{
			"invoice_id": structpb.NewStringValue("INV-" + key), "amount_minor": budgetAmount, "currency": budgetCurrency,
			"customer_id": budgetCustomerIDs[rand.IntN(budgetCustomers)]}}
		_, err := oneCall(ctx, cl.client(w), cl.auth, key, name, args)
		return err
	}
}

// The values every budget scenario call shares: its amount, its currency,
// and the customers it picks from.
var (
	budgetAmount      = structpb.NewNumberValue(4900)
	budgetCurrency    = structpb.NewStringValue("EUR")
	budgetCustomerIDs = func() []*structpb.Value {
		out := make([]*structpb.Value, budgetCustomers)
		for i := range out {
			out[i] = structpb.NewStringValue(fmt.Sprintf("cust-%d", i))
		}
		return out
	}()
)

// levels are the client counts scenario sc is measured at: the sweep's,
// and the tenant-wide limit's level for it when the sweep lacks it; extra
// says which were added (opledger and its companions only).
func (o *Options) levels(sc string) (all []int, extra map[int]bool) {
	all = slices.Clone(o.Concurrency)
	extra = map[int]bool{}
	if sc == ScenarioOneCallTenantLimit && !slices.Contains(all, tenantLimitConcurrency) {
		all = append(all, tenantLimitConcurrency)
		extra[tenantLimitConcurrency] = true
	}
	return all, extra
}

// BudgetTargets evaluates budgetTargets on r: each budget scenario against
// execute-one-call's job measured in the same point, taking turns with it
// (SystemOpledgerOneCall), with the CPU per op of both sides by process
// (server, PostgreSQL): where the cost goes.
func (r *Report) BudgetTargets() []Target {
	var ts []Target
	us := func(c *CPUCost) string {
		if c == nil {
			return "CPU not accounted"
		}
		return fmt.Sprintf("server %d + PostgreSQL %d µs/op", c.Server.Microseconds(), c.Postgres.Microseconds())
	}
	for _, x := range budgetTargets {
		text := fmt.Sprintf("%s (%s) ≥ %.2f × execute-one-call beside it (c=%d)", x.sc, x.what, x.min, x.conc)
		o, okO := r.at(x.sc, SystemOpledger, x.conc)
		b, okB := r.at(x.sc, SystemOpledgerOneCall, x.conc)
		if !okO || !okB {
			ts = append(ts, Target{Text: text + ": not measured in this run"})
			continue
		}
		q, qt := ratioOf(o, b)
		ts = append(ts, Target{Met: met(q >= x.min), Text: fmt.Sprintf("%s: %s (%s vs %s)%s", text, qt,
			us(o.CPU), us(b.CPU), byRound(o, b, "%.2f", opsRatio))})
	}
	return ts
}

// oneCall is a Prepare with execute of a new operation of tool name under
// key: it must succeed with a charge.
func oneCall(ctx context.Context, cl opledgerv1.LedgerServiceClient, auth context.Context, key, name string, args *structpb.Struct) (string, error) {
	ctx = metadata.NewOutgoingContext(ctx, withKey(auth, key))
	r, err := cl.Prepare(ctx, &opledgerv1.PrepareRequest{Tool: name, Args: args, Execute: true})
	if err != nil {
		return "", err
	}
	op := r.GetOperation()
	if r.GetReplayed() || r.GetExecutionReplayed() || op.GetState() != opledgerv1.State_STATE_SUCCEEDED || op.GetExternalRef() == "" {
		return "", fmt.Errorf("prepare with execute: state %s, external ref %q, replayed %t/%t", op.GetState(), op.GetExternalRef(),
			r.GetReplayed(), r.GetExecutionReplayed())
	}
	return op.GetExternalRef(), nil
}
