// Package layering_test enforces the import rules of docs/development.md:
// cmd → server → ledger → store, only store imports pgx, and the
// interceptors, clients and the MCP gateway depend on neither server nor
// store. It also guards the Go client's own module (clients/go) and the
// generated code's (gen/go): what they may depend on, and that the generated
// Go code exists exactly once.
package layering_test

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/opledger/opledger/"

// imports maps each package directory (relative to the repository root) to
// the imports of its non-test Go files.
func imports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	const root = "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "node_modules" || d.Name() == "gen") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, root+"/")))
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[dir][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func under(dir, root string) bool { return dir == root || strings.HasPrefix(dir, root+"/") }

func TestImportRules(t *testing.T) {
	pkgs := imports(t)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages; is the walk rooted at the repository?", len(pkgs))
	}
	forbidden := func(dir string, deny ...string) {
		for imp := range pkgs[dir] {
			for _, d := range deny {
				if imp == d || strings.HasPrefix(imp, d+"/") {
					t.Errorf("%s imports %s, which the layering forbids", dir, imp)
				}
			}
		}
	}
	product := []string{"internal", "server", "store", "interceptors", "service", "executor", "tool", "clients/go", "examples"}
	for dir := range pkgs {
		if !under(dir, "store") {
			forbidden(dir, "github.com/jackc/pgx/v5")
		}
		// The product never depends on the proof kit, not even in a build
		// with failpoints: the chaos binary installs its failpoints and
		// defect switches from cmd (proof/failpoint.Install), through the
		// ledger's hooks and the executor registry.
		for _, p := range product {
			if under(dir, p) {
				forbidden(dir, module+"proof", module+"cmd")
			}
		}
		switch {
		case under(dir, "internal/reason"):
			forbidden(dir, module+"server", module+"store", module+"internal/ledger", module+"interceptors")
		case under(dir, "clients/go"):
			// A module of its own: the standard library, the generated API,
			// grpc, protobuf and genproto, nothing of the server's module.
			for imp := range pkgs[dir] {
				if !clientImportAllowed(imp) {
					t.Errorf("%s imports %s: the Go client module may import only the standard library, %s, grpc, protobuf and genproto", dir, imp, module+"gen/go")
				}
			}
		case under(dir, "interceptors"), under(dir, "clients"), under(dir, "internal/mcpgateway"):
			forbidden(dir, module+"server", module+"store", module+"internal/ledger")
		case under(dir, "store"):
			forbidden(dir, module+"internal/ledger", module+"server", module+"interceptors")
		case under(dir, "internal/ledger"):
			forbidden(dir, module+"server", module+"interceptors")
		case under(dir, "server"):
			forbidden(dir, module+"service")
		case under(dir, "internal/probe"):
			// The probe talks to a downstream, through the executor, and to
			// nothing of the ledger's.
			forbidden(dir, module+"server", module+"store", module+"internal/ledger", module+"interceptors", module+"service")
		case under(dir, "internal/console"):
			// The console is an edge beside server: it goes through the
			// ledger's functions, never around them.
			forbidden(dir, module+"server", module+"store", module+"interceptors", module+"service")
		}
	}
}

// clientImportAllowed is the import rule of the Go client module.
func clientImportAllowed(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	if !strings.Contains(first, ".") {
		return true // the standard library
	}
	for _, p := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto",
		module + "gen/go", module + "clients/go"} {
		if imp == p || strings.HasPrefix(imp, p+"/") {
			return true
		}
	}
	return false
}

// goMod is the part of a go.mod file these tests read.
type goMod struct {
	module, goVersion string
	direct, indirect  []string // module paths
	replaces          map[string]string
}

func readGoMod(t *testing.T, path string) goMod {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := goMod{replaces: map[string]string{}}
	block := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		indirect := strings.HasSuffix(line, "// indirect")
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch {
		case fields[0] == ")":
			block = ""
			continue
		case len(fields) == 2 && fields[1] == "(":
			block = fields[0]
			continue
		}
		kind := block
		if kind == "" {
			kind, fields = fields[0], fields[1:]
		}
		switch kind {
		case "module":
			m.module = fields[0]
		case "go":
			m.goVersion = fields[0]
		case "require":
			if indirect {
				m.indirect = append(m.indirect, fields[0])
			} else {
				m.direct = append(m.direct, fields[0])
			}
		case "replace":
			if i := slices.Index(fields, "=>"); i > 0 {
				m.replaces[fields[0]] = fields[i+1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestClientModules: a program that uses the Go client depends on grpc,
// protobuf and genproto (and what they need), never on the server's modules
// (pgx, otel, prometheus …), and the server builds against the client and the
// generated code in this repository.
func TestClientModules(t *testing.T) {
	allowedDirect := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto/googleapis/rpc", module + "gen/go"}
	for _, c := range []struct{ path, module string }{
		{"../../clients/go/go.mod", module + "clients/go"},
		{"../../gen/go/go.mod", module + "gen/go"},
	} {
		m := readGoMod(t, c.path)
		if m.module != c.module {
			t.Errorf("%s: module %q, want %q", c.path, m.module, c.module)
		}
		if m.goVersion == "" {
			t.Errorf("%s: no go line", c.path)
		}
		for _, d := range m.direct {
			if !slices.Contains(allowedDirect, d) {
				t.Errorf("%s requires %s: the client modules depend only on grpc, protobuf and genproto", c.path, d)
			}
		}
		for _, d := range m.indirect {
			if !strings.HasPrefix(d, "golang.org/x/") && !strings.HasPrefix(d, "google.golang.org/") {
				t.Errorf("%s needs %s indirectly: a client module must not pull that into its users' builds", c.path, d)
			}
		}
	}
	root := readGoMod(t, "../../go.mod")
	for mod, dir := range map[string]string{module + "clients/go": "./clients/go", module + "gen/go": "./gen/go"} {
		if got := root.replaces[mod]; got != dir {
			t.Errorf("go.mod: replace %s => %q, want %s", mod, got, dir)
		}
	}
}

// TestOneCopyOfTheGeneratedGoCode: two copies of ledger.proto's Go code in
// one binary make protobuf-go panic at start-up (a conflicting registration),
// so the generated Go code lives only in gen/go.
func TestOneCopyOfTheGeneratedGoCode(t *testing.T) {
	var found []string
	const root = "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "node_modules" || d.Name() == "target") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".pb.go") {
			found = append(found, filepath.ToSlash(strings.TrimPrefix(path, root+"/")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gen/go/opledger/v1/ledger.pb.go", "gen/go/opledger/v1/ledger_grpc.pb.go"}
	if !slices.Equal(found, want) {
		t.Errorf("generated Go files %v, want exactly %v", found, want)
	}
}
