//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
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
	left  int // < 0: unlimited
}

var (
	mu      sync.Mutex
	actions = parse(os.Getenv("OPLEDGER_FAILPOINTS"))
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
			}
		}
		switch {
		case act == "kill" || act == "panic":
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
	if a == nil || a.left == 0 {
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
	case "sleep":
		time.Sleep(a.sleep)
	}
}
