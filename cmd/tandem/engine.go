package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/tandem-serve/tandem/services/workersvc"
)

// runEngine is 'tandem engine check': probe a GPU engine server as a worker in
// front of it would use it.
func runEngine(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "Usage: tandem engine check --engine vllm|trtllm|sglang --engine-url URL [flags]")
		return errors.New("engine: the subcommand is check")
	}
	fs := newFlagSet("engine check", "engine check --engine vllm|trtllm|sglang --engine-url URL [--tokenizer FILE] [--model ID] "+
		"[--kv-events-endpoint EP --kv-events-replay-endpoint EP --kv-events-topic T] [--block-size N] [--json]", stderr)
	var c workersvc.EngineCheck
	c.RegisterFlags(fs)
	if err := parse(fs, args[1:], getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("engine check: unexpected arguments %q", fs.Args())
	}
	return c.Run(ctx, stdout, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
