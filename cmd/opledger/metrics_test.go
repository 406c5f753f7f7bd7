package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgcluster"
)

// metricValue returns the value of the sample whose name and labels match
// the regular expression pattern in a Prometheus text exposition.
func metricValue(t *testing.T, body, pattern string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + pattern + ` ([0-9.e+-]+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "no sample matches %s", pattern)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// TestMetricsAfterFlow scrapes /metrics of a real server after a full flow
// with repeats and checks that the ledger's counters moved.
func TestMetricsAfterFlow(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	port, err := pgcluster.FreePort()
	require.NoError(t, err)
	p := env.StartProcess(harness.ProcessOptions{Env: []string{fmt.Sprintf("OPLEDGER_METRICS_LISTEN=127.0.0.1:%d", port)}})
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	op := prepareApproved(t, p.Client, agent, approver)
	for i := 0; i < 3; i++ {
		r, err := p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, r.GetOperation().GetState())
	}

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	body := string(raw)
	t.Logf("metrics excerpt:\n%s", regexp.MustCompile(`(?m)^opledger_(executions|duplicates|replays|downstream_outcomes|operations|reconciliations|approval_latency_seconds_count).*$`).FindAllString(body, -1))

	require.Equal(t, 1.0, metricValue(t, body, `opledger_executions_started_total\{tool="pay_invoice"\}`))
	require.Equal(t, 1.0, metricValue(t, body, `opledger_downstream_outcomes_total\{outcome="succeeded",tool="pay_invoice"\}`))
	require.Equal(t, 2.0, metricValue(t, body, `opledger_replays_served_total\{method="Execute",tool="pay_invoice"\}`))
	require.Equal(t, 2.0, metricValue(t, body, `opledger_duplicates_prevented_total\{method="Execute",tool="pay_invoice"\}`))
	require.Equal(t, 1.0, metricValue(t, body, `opledger_approval_latency_seconds_count\{decision="APPROVE",tool="pay_invoice"\}`))
	require.Equal(t, 3.0, metricValue(t, body, `opledger_grpc_server_handled_total\{grpc_code="OK",grpc_method="Execute",grpc_service="opledger.v1.LedgerService",grpc_type="unary"\}`))
	require.Equal(t, 0.0, metricValue(t, body, `opledger_operations\{state="EXECUTING"\}`))
	require.Equal(t, 1.0, metricValue(t, body, `opledger_downstream_duration_seconds_count\{outcome="succeeded",tool="pay_invoice"\}`))
}
