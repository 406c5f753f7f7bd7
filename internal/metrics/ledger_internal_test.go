package metrics

import (
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// value is the counter (or a histogram's count) of the series of family
// name whose labels are labels, from m's registry; -1 when there is none.
func value(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return seriesValue(s)
		}
	}
	return -1
}

func seriesValue(s *dto.Metric) float64 {
	if h := s.GetHistogram(); h != nil {
		return float64(h.GetSampleCount())
	}
	return s.GetCounter().GetValue()
}

// TestLedgerSeriesCount: the series kept per tool and outcome count what
// the vectors would, from concurrent callers, and only an unknown outcome
// counts as unknown.
func TestLedgerSeriesCount(t *testing.T) {
	t.Parallel()
	m := New(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				m.ExecutionStarted("pay")
				m.DownstreamCalled("pay", "succeeded", time.Millisecond)
			}
			m.ExecutionStarted("mail")
			m.DownstreamCalled("mail", "unknown", time.Second)
		})
	}
	wg.Wait()
	require.Equal(t, 800.0, value(t, m, "opledger_executions_started_total", map[string]string{"tool": "pay"}))
	require.Equal(t, 8.0, value(t, m, "opledger_executions_started_total", map[string]string{"tool": "mail"}))
	require.Equal(t, 800.0, value(t, m, "opledger_downstream_outcomes_total", map[string]string{"tool": "pay", "outcome": "succeeded"}))
	require.Equal(t, 8.0, value(t, m, "opledger_downstream_outcomes_total", map[string]string{"tool": "mail", "outcome": "unknown"}))
	require.Equal(t, 800.0, value(t, m, "opledger_downstream_duration_seconds", map[string]string{"tool": "pay", "outcome": "succeeded"}))
	require.Equal(t, -1.0, value(t, m, "opledger_outcome_unknown_total", map[string]string{"tool": "pay"}))
	require.Equal(t, 8.0, value(t, m, "opledger_outcome_unknown_total", map[string]string{"tool": "mail"}))
}

func BenchmarkDownstreamSeries(b *testing.B) {
	m := New(nil)
	for b.Loop() {
		m.ExecutionStarted("pay_invoice")
		m.DownstreamCalled("pay_invoice", "succeeded", time.Millisecond)
	}
}
