package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// parseConfig parses args over env the way serve does.
func parseConfig(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg Config
	finish := bindConfig(fs, &cfg, func(k string) string { return env[k] })
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, finish()
}

// TestConfigFlagsAndEnvironment: a flag beats its variable, which beats the
// default; bad values are refused with the flag's name.
func TestConfigFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 16384, cfg.FinishedCache)
	require.Equal(t, 720*time.Hour, cfg.Retention)
	require.Equal(t, 16384, finishedCacheSize(cfg.FinishedCache))

	cfg, err = parseConfig(t, nil, map[string]string{"OPLEDGER_FINISHED_CACHE": "0", "OPLEDGER_RETENTION": "48h"})
	require.NoError(t, err)
	require.Equal(t, 0, cfg.FinishedCache)
	require.Equal(t, -1, finishedCacheSize(cfg.FinishedCache), "0 turns the ledger's cache off")
	require.Equal(t, 48*time.Hour, cfg.Retention)

	cfg, err = parseConfig(t, []string{"--finished-cache", "100"}, map[string]string{"OPLEDGER_FINISHED_CACHE": "0"})
	require.NoError(t, err)
	require.Equal(t, 100, cfg.FinishedCache)

	_, err = parseConfig(t, []string{"--finished-cache", "-3"}, nil)
	require.ErrorContains(t, err, "--finished-cache")
	_, err = parseConfig(t, []string{"--retention", "soon"}, nil)
	require.ErrorContains(t, err, "--retention")
}
