//go:build failpoints

package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

type action struct {
	kind  string
	sleep time.Duration
	left  int     // < 0: unlimited
	rate  float64 // > 0: fire with this probability on each hit
}

var (
	mu         sync.Mutex
	actions    = parse(os.Getenv("OPLEDGER_FAILPOINTS"))
	freshKeys  = os.Getenv("OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY") == "1"
	defects    = parseDefects(os.Getenv("OPLEDGER_UNSAFE_DEFECTS"))
	rateSource = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
)

func parse(spec string) map[string]*action {
	out := map[string]*action{}
	for _, part := range strings.Split(spec, ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		a := &action{left: -1}
		if n, rest, ok := strings.Cut(act, "*"); ok {
			if c, err := strconv.Atoi(n); err == nil {
				a.left, act = c, rest
			} else if p, err := strconv.ParseFloat(strings.TrimPrefix(n, "p"), 64); err == nil && strings.HasPrefix(n, "p") {
				if !(p > 0 && p <= 1) {
					panic(fmt.Sprintf("failpoint %s: probability %q must be within (0, 1]", name, n))
				}
				a.rate, act = p, rest
			}
		}
		switch {
		case act == "kill" || act == "panic" || act == "stop":
			a.kind = act
		case strings.HasPrefix(act, "sleep(") && strings.HasSuffix(act, ")"):
			d, err := time.ParseDuration(act[len("sleep(") : len(act)-1])
			if err != nil {
				panic(fmt.Sprintf("failpoint %s: %v", name, err))
			}
			a.kind, a.sleep = "sleep", d
		default:
			panic(fmt.Sprintf("failpoint %s: unknown action %q", name, act))
		}
		out[name] = a
	}
	return out
}

// Inject performs the action configured for name, if any.
func Inject(name string) {
	mu.Lock()
	a := actions[name]
	if a == nil || a.left == 0 || a.rate > 0 && rateSource.Float64() >= a.rate {
		mu.Unlock()
		return
	}
	if a.left > 0 {
		a.left--
	}
	mu.Unlock()
	switch a.kind {
	case "kill":
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "panic":
		panic("failpoint " + name)
	case "stop":
		// The stop of a process takes effect asynchronously: the calling
		// thread could run on for a while before every thread is stopped.
		// Waiting for the SIGCONT that ends it keeps this goroutine at the
		// point, whatever the others do.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGSTOP\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-cont
	case "sleep":
		time.Sleep(a.sleep)
	}
}

// FreshDownstreamKeys reports whether OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY=1
// asks the ledger to send a new downstream key on every claim. That breaks
// deduplication on purpose: the chaos suite's control run uses it to prove
// that its checker sees the duplicates a broken ledger would cause.
func FreshDownstreamKeys() bool { return freshKeys }

func parseDefects(spec string) map[string]bool {
	known := map[string]bool{DefectRedirectFailed: true, DefectRefusalOverrides: true, DefectApprovalClaim: true,
		DefectServerClock: true, DefectTakeoverNoDedupe: true, DefectPolicyClaim: true}
	out := map[string]bool{}
	for _, name := range strings.Split(spec, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !known[name] {
			panic(fmt.Sprintf("OPLEDGER_UNSAFE_DEFECTS: unknown defect %q", name))
		}
		out[name] = true
	}
	return out
}

// Defect reports whether OPLEDGER_UNSAFE_DEFECTS names the defect: the
// ledger then behaves as it did before that defect was fixed, so that the
// chaos suite's control runs can prove that the checker catches it.
func Defect(name string) bool { return defects[name] }
