package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/store"
)

// pgbenchScript names, per scenario, the pgbench script holding the same
// database work.
var pgbenchScript = map[string]string{
	ScenarioPrepare:        "prepare",
	ScenarioExecuteNew:     "execute",
	ScenarioOneCall:        "one-call",
	ScenarioExecuteReplay:  "read",
	ScenarioGet:            "read",
	ScenarioDuplicateStorm: "duplicate",
}

// pgbenchScriptNames lists every script.
var pgbenchScriptNames = []string{"prepare", "execute", "one-call", "one-call-budgeted", "read", "duplicate"}

// The values opledger binds for the bench's tool, as the ceiling binds them.
const (
	pgbArgs   = `{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"}`
	pgbResult = `{"amount_minor":4900,"created":1700000000,"currency":"EUR","id":"ch_0123456789abcdef01234567",` +
		`"idempotency_key":"opk_0123456789abcdef0123456789abcdef0123456","invoice_id":"INV-2048","object":"charge",` +
		`"request":{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"},"status":"succeeded"}`
	pgbFingerprint = "v1:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// A bind is what a statement's sqlc.arg(x) becomes in a pgbench script: a
// value, passed as a parameter (pgbench -D, sent as a bind parameter in
// prepared mode, as pgx sends it), or, with expr, SQL text written in its
// place (per-op values built from the script's random :r, and NULL, which
// a pgbench variable cannot carry).
type bind struct {
	value string
	expr  bool
}

func val(v string) bind  { return bind{value: v} }
func expr(e string) bind { return bind{value: e, expr: true} }

// The per-op values: each op gets a fresh :r, and its operation the same
// id, key and downstream key in every statement of the op.
var (
	pgbID      = expr(`'op_' || :r`)
	pgbKey     = expr(`'pgb-' || :r`)
	pgbDownKey = expr(`'opk_' || :r`)
	// pgbSynthetic is one of the synthetic rows (seedSynthetic) chosen by :i.
	pgbSynthetic = expr(`'op_zz' || lpad(:i::text, 24, '0')`)
	pgbNull      = expr("NULL")
)

// pgbInsert binds OperationInsert as Prepare binds it for the bench's tool
// (no approval, no notification); with claim, as the one-call path does.
func pgbInsert(claim bool) map[string]bind {
	owner := pgbNull
	if claim {
		owner = val("bench-pgbench")
	}
	return map[string]bind{
		"id": pgbID, "tenant": val(tenant), "tool": val(toolName), "tool_version": val("1"), "idempotency_key": pgbKey,
		"args": val(pgbArgs), "fingerprint": val(pgbFingerprint), "claim": val(fmt.Sprint(claim)), "claim_to": val("EXECUTING"),
		"state": val("READY"), "prepared_by": val("pr_bench"), "approval_required": val("false"), "approval_ttl_ms": val("0"),
		"downstream_key": pgbDownKey, "lease_owner": owner, "lease_seconds": val("31"), "actor": val("bench"),
		"detail": val("prepared with key digest 0123456789abcdef"), "claim_event": val("CLAIMED"), "claim_from": val("READY"),
		"notify": val("false"),
		// The policy's judgement of the bench's tool (no rules: no approval),
		// and nothing an edit or a budget would add.
		"approvals_needed": val("0"), "policy_digest": val(pgbPolicyDigest), "approval_rule": expr("''"), "approvals": val("[]"),
		"supersedes": pgbNull, "approved_by": pgbNull, "approved_reason": pgbNull,
		"budget_names": pgbNull, "budget_scopes": pgbNull, "identity": pgbNull,
		// The events' receipts (doc hashes, PREPARED's facts) as store
		// passes them (store/receipts.go).
		"prepared_doc": val(pgbDoc), "prepared_facts": val(pgbPreparedFacts), "claimed_doc": val(pgbDoc),
		"take_identity": val("false"), "identity_window_seconds": val("0"),
	}
}

// pgbInsertBudgeted binds OperationInsert as the one-call path binds it for
// one-call-budgeted's tool: its share of the customer's budget reserved and
// its identity (a new invoice) taken by the insert itself.
func pgbInsertBudgeted() map[string]bind {
	b := pgbInsert(true)
	b["tool"] = val(budgetedTool)
	delete(b, "budget_names")
	delete(b, "budget_scopes")
	b["budget_name"], b["budget_scope"] = val("bench_per_customer"), expr(`'cust-' || (:r::bigint % 1000)`)
	b["identity"], b["take_identity"], b["identity_window_seconds"] = expr(`'INV-' || :r`), val("true"), val("2592000")
	b["amount"], b["max_count"], b["has_sum"] = val("0"), val(fmt.Sprint(customerLimitCount)), val("false")
	b["max_sum"], b["share_window"], b["max_uses"] = val("0"), val("3600"), val("100000")
	return b
}

// pgbArgsDigest stands for the digests of the args and the result the
// events record (a SHA-256 in hex, as store computes them).
const pgbArgsDigest = "1111111111111111111111111111111111111111111111111111111111111111"

// pgbDoc stands for an event's doc hash (audit.DocHash), as bytea.
const pgbDoc = `\x2222222222222222222222222222222222222222222222222222222222222222`

// pgbPreparedFacts and pgbSucceededFacts are the facts of the PREPARED and
// SUCCEEDED events store writes for the bench's tool (audit.FactsText).
const (
	pgbPreparedFacts = `{"approvals_needed":"0","approver":null,"args_digest":"` + pgbArgsDigest + `","downstream_key":"opk_0123456789abcdef0123456789abcdef0123456",` +
		`"fingerprint":"` + pgbFingerprint + `","policy_digest":"` + pgbPolicyDigest + `","prepared_by":"pr_bench","reason":null,"supersedes":null,` +
		`"tenant":"bench","tool":"bench_charge","tool_version":"1"}`
	pgbSucceededFacts = `{"error_digest":"","external_ref":"ch_0123456789abcdef01234567","result_digest":"` + pgbArgsDigest + `"}`
)

// pgbPolicyDigest stands for the bench tool's policy digest, which the
// claim requires to be current.
const pgbPolicyDigest = "0000000000000000000000000000000000000000000000000000000000000000"

// pgbClaim binds OperationClaim or OperationClaimKnown as Execute binds
// them, on operation id.
func pgbClaim(id bind) map[string]bind {
	return map[string]bind{
		"id": id, "tenant": val(tenant), "lease_owner": val("bench-pgbench"), "lease_seconds": val("31"),
		"to_state": val("EXECUTING"), "from_state": val("READY"), "require_approval_in_force": val("true"),
		"event_type": val("CLAIMED"), "actor": val("bench"),
		"require_policy_current": val("true"), "policy_digests": val("{" + pgbPolicyDigest + "}"),
		"doc": val(pgbDoc),
	}
}

// pgbSucceeded binds OperationTransition as the holder binds it to record a
// success.
func pgbSucceeded() map[string]bind {
	return map[string]bind{
		"id": pgbID, "tenant": val(tenant), "to_state": val("SUCCEEDED"), "external_ref": val("ch_0123456789abcdef01234567"),
		"result": val(pgbResult), "set_error": val("true"), "error": pgbNull, "event_type": val("SUCCEEDED"),
		"reconcile_after_seconds": val("1"), "from_states": val("{EXECUTING,OUTCOME_UNKNOWN}"), "fence": val("1"),
		"require_lease_expired": val("false"), "require_unsent": val("false"), "require_first_send": val("false"), "require_sent_if_ready": val("false"),
		"key_retention_seconds": val("0"), "ahead_seconds": val("0"), "key_window_factor": val("0"), "actor": val("server:bench-pgbench"),
		"detail": val("downstream succeeded; external ref recorded"),
		// The SUCCEEDED event's receipt: its doc hash, and its facts (the
		// result's digest, the error cleared).
		"doc": val(pgbDoc), "facts": val(pgbSucceededFacts),
	}
}

// pgbGet binds OperationGet on operation id.
func pgbGet(id bind) map[string]bind { return map[string]bind{"id": id, "tenant": val(tenant)} }

var sqlcArg = regexp.MustCompile(`sqlc\.n?arg\((\w+)\)`)

// pgbenchStatement is the named statement of store/queries with binds
// written in: parameters become pgbench variables prefixed with prefix (so
// that two statements of one script keep theirs apart), whose values go to
// defs. Every placeholder must be bound, and every bind used: a statement
// that changed fails here rather than measuring something else.
func pgbenchStatement(name, prefix string, binds map[string]bind, defs map[string]string) (string, error) {
	sql, err := store.QueryText(name)
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	var missing []string
	sql = sqlcArg.ReplaceAllStringFunc(sql, func(m string) string {
		arg := sqlcArg.FindStringSubmatch(m)[1]
		b, ok := binds[arg]
		if !ok {
			missing = append(missing, arg)
			return m
		}
		used[arg] = true
		if b.expr {
			return "(" + b.value + ")"
		}
		defs[prefix+arg] = b.value
		return ":" + prefix + arg
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("bench: pgbench: %s has arguments the ceiling does not bind: %s", name, strings.Join(missing, ", "))
	}
	for arg := range binds {
		if !used[arg] {
			return "", fmt.Errorf("bench: pgbench: %s no longer takes %s", name, arg)
		}
	}
	return sql + "\n", nil
}

// pgbenchScripts builds script name from store/queries/operation.sql's
// statements, each its own transaction as in opledger, and returns it with
// the values of its variables. Reads choose among :nsyn synthetic rows,
// duplicates among :hot.
func pgbenchScripts(name string) (string, map[string]string, error) {
	type stmt struct {
		query, prefix string
		binds         map[string]bind
	}
	var head string
	var stmts []stmt
	newOp := `\set r random(1, 9223372036854775806)` + "\n"
	switch name {
	case "prepare":
		head, stmts = newOp, []stmt{{"OperationInsert", "i_", pgbInsert(false)}}
	case "execute":
		// Prepare's insert, then Execute's claim (with the copy the
		// Prepare left, as on one replica) and its outcome.
		head, stmts = newOp, []stmt{{"OperationInsert", "i_", pgbInsert(false)}, {"OperationClaimKnown", "c_", pgbClaim(pgbID)},
			{"OperationTransition", "t_", pgbSucceeded()}}
	case "one-call":
		// The one-call path: the insert that claims, then the outcome.
		head, stmts = newOp, []stmt{{"OperationInsert", "i_", pgbInsert(true)}, {"OperationTransition", "t_", pgbSucceeded()}}
	case "one-call-budgeted":
		// The one-call path of a tool with a limit per customer and an
		// identity: the insert that reserves, takes and claims, then the
		// outcome (whose trigger records the identity's effect).
		head, stmts = newOp, []stmt{{"OperationInsertReserving", "i_", pgbInsertBudgeted()}, {"OperationTransition", "t_", pgbSucceeded()}}
	case "read":
		head, stmts = `\set i random(1, :nsyn)`+"\n", []stmt{{"OperationGet", "g_", pgbGet(pgbSynthetic)}}
	case "duplicate":
		// A duplicate's work in a storm: a claim that finds the operation
		// taken (and reads it), then, woken, another that reads the
		// outcome. The hot rows are finished, so no claim ever succeeds.
		head, stmts = `\set i random(1, :hot)`+"\n", []stmt{{"OperationClaim", "c_", pgbClaim(pgbSynthetic)},
			{"OperationClaim", "c_", pgbClaim(pgbSynthetic)}}
	default:
		return "", nil, fmt.Errorf("bench: unknown pgbench script %q", name)
	}
	defs := map[string]string{}
	var b strings.Builder
	b.WriteString(head)
	for _, s := range stmts {
		sql, err := pgbenchStatement(s.query, s.prefix, s.binds, defs)
		if err != nil {
			return "", nil, err
		}
		b.WriteString(sql)
	}
	return b.String(), defs, nil
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
	text, defs, err := pgbenchScripts(script)
	if err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	path := filepath.Join(dir, script+".sql")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	// Whole seconds, at least half a second past the end of the window.
	secs := int((e.opts.Duration + e.opts.warmup() + time.Second/2 + time.Second - 1) / time.Second)
	args := []string{"-n", "-M", "prepared", "-f", path, "-c", strconv.Itoa(conc), "-j", strconv.Itoa(min(conc, 2)),
		"-T", strconv.Itoa(secs), "-D", "nsyn=" + strconv.Itoa(e.opts.Seed), "-D", "hot=" + strconv.Itoa(stormSize(conc)),
		"-l", "--log-prefix=" + filepath.Join(dir, "log"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(e.cluster.Port()), "-U", "postgres"}
	for _, k := range slices.Sorted(maps.Keys(defs)) {
		args = append(args, "-D", k+"="+defs[k])
	}
	args = append(args, db)
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
	countDB := e.pgStatReset(ctx) == nil
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
	if countDB && len(lat.ends) > 0 {
		if calls, err := e.pgStatCalls(ctx, db); err == nil {
			res.DBCallsPerOp = float64(calls) / float64(len(lat.ends))
		}
	}
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
