package main

import (
	"context"
	"errors"
	"io"
)

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return errors.New("bench: not built yet")
}
