package client_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opledger/opledger/clients/go/internal/require"
)

// TestDocSnippetsBuild: every complete Go file in docs/clients/go.md (a
// ```go block that starts with "package") builds and vets in a module of its
// own that requires the client the way the page's install section says.
func TestDocSnippetsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the snippets with the go command")
	}
	t.Parallel()
	doc, err := os.ReadFile("../../docs/clients/go.md")
	require.NoError(t, err)
	var files []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		if strings.HasPrefix(m[1], "package ") {
			files = append(files, m[1])
		}
	}
	require.GreaterOrEqual(t, len(files), 3)
	client, err := filepath.Abs(".")
	require.NoError(t, err)
	gen, err := filepath.Abs("../../gen/go")
	require.NoError(t, err)
	mod := t.TempDir()
	gomod := fmt.Sprintf("module example.com/docs\n\ngo 1.23.0\n\nrequire github.com/opledger/opledger/clients/go v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/opledger/opledger/clients/go => %s\n\nreplace github.com/opledger/opledger/gen/go => %s\n", client, gen)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644))
	for i, src := range files {
		dir := filepath.Join(mod, fmt.Sprintf("snippet%d", i))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"vet", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
}
