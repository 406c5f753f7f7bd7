package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pgbenchScript names, per scenario, the pgbench script holding the same
// database work.
var pgbenchScript = map[string]string{
	ScenarioPrepare:        "prepare",
	ScenarioExecuteNew:     "execute",
	ScenarioExecuteReplay:  "read",
	ScenarioGet:            "read",
	ScenarioDuplicateStorm: "duplicate",
}

// The statements below are store/queries/operation.sql's, with the values
// opledger binds written in: the ceiling runs exactly what opledger asks
// PostgreSQL to do, minus everything opledger does around it.
const (
	pgbInsert = `\set r random(1, 9223372036854775806)
WITH ins AS (
    INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state,
                           prepared_by, approval_required, approval_ttl_ms, downstream_key, events)
    VALUES ('op_' || :r, 'bench', 'bench_charge', '1', 'pgb-' || :r,
            '{"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}',
            'v1:' || md5(:r::text) || md5(:r::text || 'f'), 'READY',
            'pr_bench', false, 0, 'opk_' || md5(:r::text || 'k'), 1)
    ON CONFLICT ON CONSTRAINT operation_idempotency DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT ins.id, 1, 'PREPARED', 'bench', NULL, ins.state, 0, 0, 'prepared with key digest 0123456789abcdef' FROM ins
)
SELECT * FROM ins;
`
	pgbClaim = `WITH upd AS (
    UPDATE operation o SET
        state = 'EXECUTING',
        fence = o.fence + 1,
        attempts = o.attempts + 1,
        lease_owner = 'bench-pgbench',
        lease_expires_at = now() + make_interval(secs => 30::float8),
        next_reconcile_at = now() + make_interval(secs => 30::float8),
        first_claimed_at = COALESCE(o.first_claimed_at, now()),
        events = o.events + 1,
        updated_at = now()
    WHERE o.id = %[1]s AND o.tenant = 'bench' AND o.state = 'READY'
      AND (NOT o.approval_required OR o.approval_expires_at > now() OR o.fence > 0)
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT upd.id, upd.events, 'CLAIMED', 'bench', 'READY', upd.state, upd.attempts, upd.fence, '' FROM upd
)
SELECT upd.*, true AS claimed FROM upd
UNION ALL
SELECT g.*, false AS claimed FROM operation g
WHERE g.id = %[1]s AND g.tenant = 'bench' AND NOT EXISTS (SELECT 1 FROM upd);
`
	pgbComplete = `WITH cur AS (
    SELECT c.id, c.state AS old_state FROM operation c
    WHERE c.id = 'op_' || :r AND c.tenant = 'bench'
    FOR UPDATE
), upd AS (
    UPDATE operation o SET
        state = 'SUCCEEDED'::text,
        external_ref = COALESCE('ch_' || md5(:r::text || 'c'), o.external_ref),
        result = COALESCE('{"id": "ch_0123456789abcdef01234567", "object": "charge", "status": "succeeded", "amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048", "idempotency_key": "opk_0123456789abcdef0123456789abcdef0123456", "request": {"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}, "created": 1700000000}'::jsonb, o.result),
        error = CASE WHEN true THEN NULL::jsonb ELSE o.error END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        next_reconcile_at = NULL,
        reconcile_attempts = 0,
        events = o.events + 1,
        updated_at = now()
    FROM cur
    WHERE o.id = cur.id
      AND o.state = ANY ('{EXECUTING,OUTCOME_UNKNOWN}'::text[])
      AND o.fence = 1
      AND (NOT false OR o.state <> 'EXECUTING' OR o.lease_expires_at < now())
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT upd.id, upd.events, 'SUCCEEDED'::text, 'server_bench-pgbench', cur.old_state, upd.state, upd.attempts, upd.fence, 'downstream succeeded; external ref recorded'
    FROM upd JOIN cur ON cur.id = upd.id
)
SELECT * FROM upd;
`
	pgbRead = `SELECT * FROM operation WHERE id = 'op_zz' || lpad(:i::text, 24, '0') AND tenant = 'bench';
`
)

// pgbenchScripts builds each script; nsyn is how many synthetic rows reads
// choose from, hot how many rows the duplicate script hammers.
func pgbenchScripts(name string) string {
	switch name {
	case "prepare":
		return pgbInsert
	case "execute":
		// One op: the Prepare insert, then Execute's two commits, each its
		// own transaction as in opledger.
		return pgbInsert + fmt.Sprintf(pgbClaim, "'op_' || :r") + pgbComplete
	case "read":
		return `\set i random(1, :nsyn)` + "\n" + pgbRead
	case "duplicate":
		// A duplicate's work in a storm: a claim that finds the operation
		// already taken, then the read that tells it what happened.
		return `\set i random(1, :hot)` + "\n" + fmt.Sprintf(pgbClaim, "'op_zz' || lpad(:i::text, 24, '0')") + pgbRead
	}
	panic("unknown pgbench script " + name)
}

var (
	pgbTPS    = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbFailed = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	pgbTxns   = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
)

// pgbench runs script at conc clients against database db for the
// run's duration, in prepared mode (as pgx caches statements), and reads the
// latencies from pgbench's per-transaction log.
func (e *env) pgbench(ctx context.Context, db, script string, conc int) Result {
	res := Result{Workload: "pgbench " + script + " on " + db}
	dir, err := os.MkdirTemp(e.dir, "pgbench-")
	if err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, script+".sql")
	if err := os.WriteFile(path, []byte(pgbenchScripts(script)), 0o644); err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	// Whole seconds, at least half a second past the end of the window.
	secs := int((e.opts.Duration + e.opts.warmup() + time.Second/2 + time.Second - 1) / time.Second)
	args := []string{"-n", "-M", "prepared", "-f", path, "-c", strconv.Itoa(conc), "-j", strconv.Itoa(min(conc, 2)),
		"-T", strconv.Itoa(secs), "-D", "nsyn=" + strconv.Itoa(e.opts.Seed), "-D", "hot=" + strconv.Itoa(stormSize(conc)),
		"-l", "--log-prefix=" + filepath.Join(dir, "log"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(e.cluster.Port()), "-U", "postgres", db}
	cmd := exec.CommandContext(ctx, filepath.Join(e.binDir, "pgbench"), args...)
	cmd.Env = cleanEnv()
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	// pgbench runs half a second or more past the CPU window, so that the
	// window sees it at full speed; its CPU is the bench process's.
	t0 := time.Now()
	cpu := e.cpuWindow(ctx, cpuProcs{bench: []int{cmd.Process.Pid}}, e.opts.warmup(), e.opts.Duration)
	err = cmd.Wait()
	if err != nil {
		res.Errors, res.FirstError = 1, fmt.Sprintf("pgbench: %v: %s", err, errorLines(out.String()))
		return res
	}
	if m := pgbFailed.FindStringSubmatch(out.String()); m != nil {
		res.Errors, _ = strconv.Atoi(m[1])
		if res.Errors > 0 {
			res.FirstError = "pgbench reported failed transactions"
		}
	}
	lat, err := readPgbenchLogs(dir, e.opts.warmup())
	if err != nil {
		res.Errors, res.FirstError = res.Errors+1, err.Error()
		return res
	}
	winStart, winEnd := t0.Add(e.opts.warmup()), t0.Add(e.opts.warmup()+e.opts.Duration)
	inWindow := 0
	for _, end := range lat.ends {
		if !end.Before(winStart) && !end.After(winEnd) {
			inWindow++
		}
	}
	res.CPU = cpu(inWindow)
	res.Ops = len(lat.latencies)
	res.OpsPerSec = float64(res.Ops) / lat.window.Seconds()
	res.P50, res.P99, res.P999 = percentiles(lat.latencies)
	if res.Ops == 0 {
		if m := pgbTxns.FindStringSubmatch(out.String()); m != nil {
			res.FirstError = "pgbench processed " + m[1] + " transactions"
		}
		if m := pgbTPS.FindStringSubmatch(out.String()); m != nil {
			res.OpsPerSec, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	return res
}

// pgbenchLog is what pgbench's transaction logs hold.
type pgbenchLog struct {
	measurement
	// ends has every transaction's end, warm-up included.
	ends []time.Time
}

// readPgbenchLogs reads pgbench's per-transaction logs (client, txn, latency
// µs, script, epoch s, µs) and keeps the transactions that ended after the
// warm-up, over the window from then to the last one's end.
func readPgbenchLogs(dir string, warmup time.Duration) (pgbenchLog, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	if len(files) == 0 {
		return pgbenchLog{}, fmt.Errorf("pgbench wrote no transaction log")
	}
	type txn struct {
		end time.Time
		lat time.Duration
	}
	var all []txn
	var first, last time.Time
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return pgbenchLog{}, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 6 {
				continue
			}
			lat, err1 := strconv.ParseInt(fs[2], 10, 64)
			sec, err2 := strconv.ParseInt(fs[4], 10, 64)
			usec, err3 := strconv.ParseInt(fs[5], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				continue // "skipped" or failed transactions
			}
			end := time.Unix(sec, usec*1000)
			start := end.Add(-time.Duration(lat) * time.Microsecond)
			if first.IsZero() || start.Before(first) {
				first = start
			}
			if end.After(last) {
				last = end
			}
			all = append(all, txn{end: end, lat: time.Duration(lat) * time.Microsecond})
		}
		fh.Close()
	}
	winStart := first.Add(warmup)
	var m pgbenchLog
	for _, t := range all {
		m.ends = append(m.ends, t.end)
		if !t.end.Before(winStart) {
			m.latencies = append(m.latencies, t.lat)
		}
	}
	m.window = last.Sub(winStart)
	if m.window <= 0 {
		m.window = time.Millisecond
	}
	m.ops = len(m.latencies)
	return m, nil
}

// errorLines picks pgbench's error messages out of its output.
func errorLines(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.Contains(strings.ToLower(l), "error") && len(out) < 3 {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, " | ")
}
