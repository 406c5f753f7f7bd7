// Package layering_test enforces the import rules of docs/development.md:
// cmd → server → ledger → store, only store imports pgx, and the
// interceptors, clients and the MCP gateway depend on neither server nor
// store.
package layering_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "node_modules" || d.Name() == "gen") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))
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
	for dir := range pkgs {
		if !under(dir, "store") {
			forbidden(dir, "github.com/jackc/pgx/v5")
		}
		switch {
		case under(dir, "reason"):
			forbidden(dir, module+"server", module+"store", module+"ledger", module+"cmd", module+"interceptors")
		case under(dir, "interceptors"), under(dir, "clients"), under(dir, "mcpgateway"):
			forbidden(dir, module+"server", module+"store", module+"ledger", module+"cmd")
		case under(dir, "store"):
			forbidden(dir, module+"ledger", module+"server", module+"cmd", module+"interceptors")
		case under(dir, "ledger"):
			forbidden(dir, module+"server", module+"cmd", module+"interceptors")
		case under(dir, "server"), under(dir, "console"):
			forbidden(dir, module+"cmd", module+"service")
		case under(dir, "service"):
			forbidden(dir, module+"cmd", module+"harness", module+"bench", module+"chaos")
		case under(dir, "console"):
			// The console is an edge beside server: it goes through the
			// ledger's functions, never around them.
			forbidden(dir, module+"server", module+"store", module+"cmd", module+"interceptors")
		}
	}
}
