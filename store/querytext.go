package store

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

//go:embed queries/*.sql
var queryFiles embed.FS

// sqlcEmbed is sqlc.embed(t), which sqlc writes as t's columns.
var sqlcEmbed = regexp.MustCompile(`sqlc\.embed\((\w+)\)`)

// QueryText returns the named statement of store/queries as sqlc reads it:
// the SQL after its "-- name: X :kind" header, without comment lines, with
// its sqlc.arg(x) and sqlc.narg(x) placeholders, and sqlc.embed(t) as the
// t.* that sqlc expands it to. It exists so that a tool
// running the same statements outside the store (the benchmark's pgbench
// ceiling) runs exactly the text the store runs and cannot drift from it.
func QueryText(name string) (string, error) {
	files, err := fs.Glob(queryFiles, "queries/*.sql")
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := queryFiles.ReadFile(f)
		if err != nil {
			return "", err
		}
		var out []string
		in := false
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
				if in {
					break
				}
				in = strings.Fields(rest)[0] == name
				continue
			}
			if in && !strings.HasPrefix(strings.TrimSpace(line), "--") {
				out = append(out, line)
			}
		}
		if in {
			return sqlcEmbed.ReplaceAllString(strings.TrimSpace(strings.Join(out, "\n")), "$1.*"), nil
		}
	}
	return "", fmt.Errorf("store: no query named %q in store/queries", name)
}
