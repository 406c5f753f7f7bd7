package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUCost is the machine's CPU time per op during a measured window, split
// by the process that spent it: what one tool call costs, beside what the
// ops per second say. Per-op figures divide the window's CPU time by the
// ops completed in it.
type CPUCost struct {
	// Server is the process answering the calls: `opledger serve`, or the
	// floor's child. Zero when it runs inside the benchmark's process
	// (in-process runs, DBOS) or when there is none (pgbench).
	Server time.Duration
	// Postgres is every PostgreSQL process: the backends, the WAL writer,
	// the checkpointer, and backends that ended during the window.
	Postgres time.Duration
	// Bench is the benchmark's own process: the load generator's gRPC
	// clients and the fake processor (and DBOS, and the in-process server,
	// when they run there), plus pgbench when it ran as its child.
	Bench time.Duration
	// Busy is the fraction of the machine's CPU time that was busy in the
	// window (everything, the processes above included).
	Busy float64
}

// Total is the CPU time of all measured processes per op.
func (c CPUCost) Total() time.Duration { return c.Server + c.Postgres + c.Bench }

// cpuUse is CPU time used up to a moment.
type cpuUse struct {
	server, postgres, bench time.Duration
	// busy and all are the whole machine's, from /proc/stat.
	busy, all time.Duration
}

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture Go supports).
const clockTick = 10 * time.Millisecond

// procTimes reads a process's own CPU time and its reaped children's
// from /proc/<pid>/stat, and its parent.
func procTimes(pid string) (self, children time.Duration, ppid int, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name, in parentheses, may hold spaces: fields start after
	// the last ')'. Then: state ppid … utime(14) stime(15) cutime(16)
	// cstime(17), numbered from the pid as 1.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("bench: malformed /proc/%s/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("bench: short /proc/%s/stat", pid)
	}
	n := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k-3], 10, 64)
		return time.Duration(v) * clockTick
	}
	ppid, _ = strconv.Atoi(f[1])
	return n(14) + n(15), n(16) + n(17), ppid, nil
}

// machineTimes reads the whole machine's busy and total CPU time. Steal
// (time the hypervisor gave elsewhere) counts in neither: it is not ours.
func machineTimes() (busy, all time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("bench: unexpected /proc/stat")
	}
	v := make([]time.Duration, 7)
	for k := range v {
		x, _ := strconv.ParseInt(f[k+1], 10, 64)
		v[k] = time.Duration(x) * clockTick
	}
	user, nice, system, idle, iowait, irq, softirq := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	busy = user + nice + system + irq + softirq
	return busy, busy + idle + iowait, nil
}

// cpuProcs are the processes besides PostgreSQL and this one whose CPU a
// window accounts.
type cpuProcs struct {
	// server answers the calls (`opledger serve`, a floor's child).
	server []int
	// bench are this process's live helpers (pgbench), counted with it.
	bench []int
}

// cpuNow samples CPU use: the processes given, PostgreSQL (the postmaster,
// what it reaped and its live children), and this process with what it
// reaped.
func (e *env) cpuNow(p cpuProcs) (cpuUse, error) {
	var u cpuUse
	var err error
	if u.busy, u.all, err = machineTimes(); err != nil {
		return u, err
	}
	self, reaped, _, err := procTimes("self")
	if err != nil {
		return u, err
	}
	u.bench = self + reaped
	for _, pid := range p.server {
		s, c, _, err := procTimes(strconv.Itoa(pid))
		if err != nil {
			return u, err
		}
		u.server += s + c
	}
	for _, pid := range p.bench {
		// A helper that already exited was reaped into this process's own
		// children's time; its /proc entry may linger as a zombie with
		// zeroes, or be gone.
		if s, c, _, err := procTimes(strconv.Itoa(pid)); err == nil {
			u.bench += s + c
		}
	}
	pm, err := e.cluster.PID()
	if err != nil {
		return u, err
	}
	s, c, _, err := procTimes(strconv.Itoa(pm))
	if err != nil {
		return u, err
	}
	u.postgres = s + c
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return u, err
	}
	for _, d := range ents {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		s, _, ppid, err := procTimes(d.Name())
		if err != nil || ppid != pm {
			continue // gone, or not PostgreSQL's
		}
		u.postgres += s
	}
	return u, nil
}

// cost turns the CPU used between a and b by ops into a per-op CPUCost.
func cost(a, b cpuUse, ops int) *CPUCost {
	if ops <= 0 {
		return nil
	}
	per := func(x, y time.Duration) time.Duration { return max(0, y-x) / time.Duration(ops) }
	c := &CPUCost{Server: per(a.server, b.server), Postgres: per(a.postgres, b.postgres), Bench: per(a.bench, b.bench)}
	if all := b.all - a.all; all > 0 {
		c.Busy = float64(b.busy-a.busy) / float64(all)
	}
	return c
}

// cpuWindow samples CPU use at the start and the end of a measured window
// that begins warmup from now and lasts dur, as runClosed's does. The
// function it returns waits for the window's end and gives the cost per
// op, or nil when a sample failed or ctx ended first.
func (e *env) cpuWindow(ctx context.Context, procs cpuProcs, warmup, dur time.Duration) func(ops int) *CPUCost {
	start := time.Now()
	done := make(chan [2]cpuUse, 1)
	go func() {
		defer close(done)
		var s [2]cpuUse
		for k, at := range []time.Time{start.Add(warmup), start.Add(warmup + dur)} {
			t := time.NewTimer(time.Until(at))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			u, err := e.cpuNow(procs)
			if err != nil {
				return
			}
			s[k] = u
		}
		done <- s
	}()
	return func(ops int) *CPUCost {
		s, ok := <-done
		if !ok {
			return nil
		}
		return cost(s[0], s[1], ops)
	}
}

// runClosedCPU is runClosed with the CPU time of its measured window
// accounted per op (nil when a sample failed).
func (e *env) runClosedCPU(ctx context.Context, procs cpuProcs, conc int, dur time.Duration, fn opFunc) (measurement, *CPUCost) {
	cpu := e.cpuWindow(ctx, procs, e.opts.warmup(), dur)
	m := runClosed(ctx, conc, e.opts.warmup(), dur, fn)
	return m, cpu(m.ops)
}

// serverPids are the `opledger serve` children under test; none when the
// server runs in this process.
func (e *env) serverPids() []int {
	var pids []int
	for _, p := range e.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}
