package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// opFunc performs one op for worker w (its n-th); an error counts against
// the measurement.
type opFunc func(ctx context.Context, w, n int) error

// measurement is what a closed-loop run observed.
type measurement struct {
	// ops and latencies inside the measured window.
	ops       int
	window    time.Duration
	latencies []time.Duration
	// total counts every op, warm-up included (to divide database
	// statement counts by).
	total      int
	errors     int
	firstError string
}

// runClosed runs conc workers, each issuing fn back to back, for warmup +
// dur. Only ops that complete inside the window after the warm-up count
// toward throughput and latency; errors count wherever they happen.
func runClosed(ctx context.Context, conc int, warmup, dur time.Duration, fn opFunc) measurement {
	start := time.Now()
	winStart, winEnd := start.Add(warmup), start.Add(warmup+dur)
	ctx, cancel := context.WithDeadline(ctx, winEnd.Add(30*time.Second))
	defer cancel()
	var (
		mu       sync.Mutex
		m        measurement
		wg       sync.WaitGroup
		errCount atomic.Int64
	)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			total, errs := 0, 0
			first := ""
			for n := 0; ; n++ {
				t0 := time.Now()
				if !t0.Before(winEnd) || ctx.Err() != nil {
					break
				}
				err := fn(ctx, w, n)
				t1 := time.Now()
				total++
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
					// A broken system must not spin: stop this worker after a
					// handful of errors.
					if errCount.Add(1) > 100 {
						break
					}
					continue
				}
				if !t1.Before(winStart) && !t1.After(winEnd) {
					lat = append(lat, t1.Sub(t0))
				}
			}
			mu.Lock()
			m.latencies = append(m.latencies, lat...)
			m.total += total
			m.errors += errs
			if m.firstError == "" {
				m.firstError = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	m.ops = len(m.latencies)
	m.window = dur
	return m
}

// result turns a measurement into a Result.
func (m measurement) result() Result {
	r := Result{Ops: m.ops, Errors: m.errors, FirstError: m.firstError}
	if m.window > 0 {
		r.OpsPerSec = float64(m.ops) / m.window.Seconds()
	}
	r.P50, r.P99, r.P999 = percentiles(m.latencies)
	return r
}

// percentiles returns the 50th, 99th and 99.9th percentiles (nearest rank).
func percentiles(lat []time.Duration) (p50, p99, p999 time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99), rank(0.999)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
	default:
		return fmt.Sprintf("%.0fms", float64(d.Microseconds())/1000)
	}
}
