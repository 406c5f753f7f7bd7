package pgtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@h:5/admin?sslmode=disable":   "postgres://u:p@h:5/x?sslmode=disable",
		"postgresql://h/":                            "postgresql://h/x",
		"postgres://h":                               "postgres://h/x",
		"host=h user=u dbname=admin sslmode=disable": "host=h user=u dbname=admin sslmode=disable dbname=x",
	} {
		require.Equal(t, want, withDatabase(in, "x"), in)
		cfg, err := pgconn.ParseConfig(withDatabase(in, "x"))
		require.NoError(t, err)
		require.Equal(t, "x", cfg.Database, in)
	}
}
