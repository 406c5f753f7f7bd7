package bench

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/opledger/opledger/store"
)

// seedChunk is how many synthetic rows one INSERT writes: one transaction
// per chunk keeps each commit's WAL and lock footprint bounded.
const seedChunk = 500_000

// seedSynthetic inserts succeeded operations from..to (inclusive) into db,
// shaped like the rows execute-new leaves behind (see
// store/migrations/0001_init.sql): ids and keys ascend with i so the
// indexes grow at their right edge, as time-ordered ids do. Events are not
// inserted: replay and get never read them. The rows are valid by
// construction, so the load skips the table's row trigger (its rules and
// wake-ups, migration 0010) as a replica applying them would: in PL/pgSQL
// it would add minutes to a load of ten million rows.
func (e *env) seedSynthetic(ctx context.Context, db string, from, to int) error {
	for lo := from; lo <= to; lo += seedChunk {
		hi := min(to, lo+seedChunk-1)
		sql := fmt.Sprintf(`SET session_replication_role = replica;
INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state,
    prepared_by, approval_required, approval_ttl_ms, attempts, fence, first_claimed_at, downstream_key, external_ref,
    result, events, created_at, updated_at, first_sent_fence)
SELECT 'op_zz' || lpad(i::text, 24, '0'), '%[1]s', '%[2]s', '1', 'syn-' || i,
    '{"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}',
    'v1:' || md5(i::text) || md5('f' || i::text), 'SUCCEEDED', '%[3]s', false, 0, 1, 1, now(),
    'opk_' || md5('k' || i::text), 'ch_' || substr(md5('c' || i::text), 1, 24),
    jsonb_build_object('id', 'ch_' || substr(md5('c' || i::text), 1, 24), 'object', 'charge', 'status', 'succeeded',
        'amount_minor', 4900, 'currency', 'EUR', 'invoice_id', 'INV-2048',
        'idempotency_key', 'opk_' || md5('k' || i::text),
        'request', '{"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}'::jsonb,
        'created', extract(epoch FROM now())::bigint),
    3, now(), now(), 1
FROM generate_series(%[4]d, %[5]d) AS i`, tenant, toolName, e.principal, lo, hi)
		if _, err := e.psql(ctx, db, sql); err != nil {
			return fmt.Errorf("bench: seed %s rows %d..%d: %w", db, lo, hi, err)
		}
	}
	return nil
}

// growStart is the small end of the growth test.
const growStart = 10_000

// growRounds is how many times each end is measured, alternately, so that
// a burst of other work on the machine hits both ends alike.
const growRounds = 3

// grow compares execute-replay with growStart stored operations and with
// Options.Grow: two databases of their own (so the sweep's tables stay
// small), each with its own server, the large one bulk-loaded. Those
// servers run without the finished-operation cache: its lookups cannot
// depend on the table's size, the database read behind them can, and with
// the cache on the small end would be served from memory and the large end
// mostly not. Ops choose
// uniformly among all stored operations, so the large table is read where
// it is cold too. The two ends are measured alternately, growRounds times
// each (at least Options.Repeat), and each end reports its median-p99 run.
func (e *env) grow(ctx context.Context, rep *Report) error {
	o := e.opts
	n := max(o.Grow, growStart)
	conc := min(4, o.Concurrency[len(o.Concurrency)-1])
	dur := 2 * o.Duration
	e.progress("grow: databases %s (%d operations) and %s (%d)", dbGrowSmall, growStart, dbGrow, n)
	var cls []*clients
	// The two ends: their databases and how many operations each holds.
	dbs, stored := []string{dbGrowSmall, dbGrow}, []int{growStart, n}
	for _, db := range dbs {
		if err := e.cluster.CreateDatabase(ctx, db, ""); err != nil {
			return err
		}
		if _, err := store.Migrate(ctx, e.cluster.URL(db)); err != nil {
			return err
		}
		if err := e.seedPrincipal(ctx, db); err != nil {
			return err
		}
		if err := e.seedSynthetic(ctx, db, 1, growStart); err != nil {
			return err
		}
		var addr string
		if o.Binary == "" {
			s, err := startStack(ctx, e.cluster.URL(db), e.toolsYAML, e.secret, o.DBConns, -1, filepath.Join(e.dir, db+"-inprocess.log"))
			if err != nil {
				return err
			}
			defer s.stop()
			addr = s.addr
		} else {
			p, err := e.startServe(ctx, 0, db, false)
			if err != nil {
				return err
			}
			defer p.stop()
			addr = p.addr
		}
		cl, err := dialClients([]string{addr}, e.apiKey, e.opts.GRPCConns)
		if err != nil {
			return err
		}
		defer cl.close()
		cls = append(cls, cl)
	}
	t0 := time.Now()
	for lo := growStart + 1; lo <= n; lo += 10 * seedChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(n, lo+10*seedChunk-1)
		if err := e.seedSynthetic(ctx, dbGrow, lo, hi); err != nil {
			return err
		}
		e.progress("grow: %d rows stored (%s)", hi, time.Since(t0).Round(time.Second))
	}
	load := time.Since(t0)
	sizes := make([]int64, 2)
	for i, db := range dbs {
		if _, err := e.psql(ctx, db, "VACUUM (ANALYZE) operation"); err != nil {
			return err
		}
		size, _ := e.psql(ctx, db, "SELECT pg_total_relation_size('operation')")
		sizes[i], _ = strconv.ParseInt(size, 10, 64)
	}
	if _, err := e.psql(ctx, "postgres", "CHECKPOINT"); err != nil {
		return err
	}
	// Three points per round: the small table, the large one read
	// uniformly (mostly cold pages: the worst case), and the large one's
	// newest growStart operations (what replays look like in service:
	// retries of recent calls).
	points := []struct {
		cl         int
		from, pool int
		replayed   string
	}{
		{0, 1, growStart, "all"},
		{1, 1, n, "all"},
		{1, n - growStart + 1, growStart, fmt.Sprintf("newest %d", growStart)},
	}
	runs := make([][]Result, len(points))
	for round := range max(growRounds, o.Repeat) {
		for i, pt := range points {
			r := e.measureOpledgerOn(ctx, cls[pt.cl], dbs[pt.cl], pt.from, pt.pool, ScenarioExecuteReplay, conc, dur, false, false)
			runs[i] = append(runs[i], r)
			e.progress("grow: round %d, %d stored (%.1f GiB with indexes), replaying %s: %s", round+1,
				stored[pt.cl], float64(sizes[pt.cl])/(1<<30), pt.replayed, r.brief())
		}
	}
	for i, pt := range points {
		errs := 0
		for _, r := range runs[i] {
			errs += r.Errors
		}
		slices.SortFunc(runs[i], func(a, b Result) int { return cmp.Compare(a.P99, b.P99) })
		r := runs[i][len(runs[i])/2]
		g := GrowPoint{Stored: stored[pt.cl], Replayed: pt.replayed, Concurrency: conc, Ops: r.Ops, OpsPerSec: r.OpsPerSec,
			P50: r.P50, P99: r.P99, P999: r.P999, Errors: errs, TableBytes: sizes[pt.cl]}
		if pt.cl == 1 {
			g.Load = load
		}
		rep.Grow = append(rep.Grow, g)
	}
	rep.GrowNote = fmt.Sprintf("Each point measured %d times for %s at c=%d, alternately; the row is the run with the median p99. "+
		"The servers run without the finished-operation cache, so every replay reads the database.", len(runs[0]), dur, conc)
	return nil
}
