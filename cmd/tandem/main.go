// Command tandem serves LLMs with conditional prefill/decode disaggregation. One
// binary runs every role: the frontend, the router, the workers, or all of them in
// one process (tandem up).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tandem-serve/tandem/services/app"
	"github.com/tandem-serve/tandem/services/process"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "tandem:", err)
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		os.Exit(1)
	}
}

// exitCode is an error that asks for a particular exit status (tandem health).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"up", "run the frontend, the router and the workers in one process on loopback", role(app.Up, "up [flags]")},
		{"frontend", "run the frontend: OpenAI-compatible HTTP and the Connect/gRPC API", role(app.Frontend, "frontend --router ADDR [flags]")},
		{"router", "run the router", role(app.Router, "router --decode-workers A,B [--prefill-workers C,D] [flags]")},
		{"decode", "run a decode worker (conditional disaggregation, or --mode aggregated)", role(app.Decode, "decode [flags]")},
		{"prefill", "run a prefill worker", role(app.Prefill, "prefill [flags]")},
		{"bench", "benchmark any OpenAI-compatible server: TTFT, TPOT, ITL, goodput; 'bench compare' runs the decode policies", runBench},
		{"config", "get or set the runtime policy in Consul KV (tandem/config/router, tandem/config/decode, tandem/config/planner)", runConfig},
		{"drain", "take a worker out of rotation (health NOT_SERVING) without stopping it; --undo puts it back", runDrain},
		{"route", "ask a router where a prompt would go and why (--explain)", runRoute},
		{"workers", "list the workers a router can route to, with their mode and whether they drain", runWorkers},
		{"health", "check a service's grpc.health.v1 status; exit 0 only when SERVING", runHealth},
		{"engine", "check a GPU engine server (vLLM, TensorRT-LLM, SGLang): what tandem will use and what is missing", runEngine},
		{"tokenize", "print the token ids and pieces a model's tokenizer makes of a text", runTokenize},
		{"version", "print the version", func(_ context.Context, _ []string, _ func(string) string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintln(stdout, process.Version())
			return err
		}},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `tandem serves LLMs with conditional prefill/decode disaggregation.

Usage: tandem <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Every flag can also be set from the environment as TANDEM_<FLAG>, upper case with
dashes as underscores (--http-addr is TANDEM_HTTP_ADDR); a flag on the command line wins.
Run 'tandem <command> --help' for a command's flags.
`)
}

// run is the whole program, callable from tests with their own args and environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], getenv, stdout, stderr)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}
