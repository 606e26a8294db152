package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/tandem-serve/tandem/services/workersvc"
)

// runEngine is 'tandem engine check': probe a GPU engine server as a worker in
// front of it would use it.
func runEngine(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// check is the only subcommand; 'tandem engine --help' shows its flags.
	if len(args) > 0 && args[0] == "check" {
		args = args[1:]
	}
	fs := newFlagSet("engine check", "engine check --engine vllm|trtllm|sglang --engine-url URL [--tokenizer FILE] [--model ID] "+
		"[--kv-events-endpoint EP --kv-events-replay-endpoint EP --kv-events-topic T] [--block-size N] [--json]", stderr)
	var c workersvc.EngineCheck
	c.RegisterFlags(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("engine check: unexpected arguments %q (the one subcommand is check)", fs.Args())
	}
	return c.Run(ctx, stdout, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}
