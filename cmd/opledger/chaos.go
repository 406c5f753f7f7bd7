package main

import (
	"context"
	"errors"
	"io"
)

func cmdChaos(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return errors.New("chaos: not built yet")
}
