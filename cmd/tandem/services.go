package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"

	"github.com/tandem-serve/tandem/services/consul"

	"github.com/tandem-serve/tandem/services/frontendsvc"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/routersvc"
	"github.com/tandem-serve/tandem/services/telemetry"
	"github.com/tandem-serve/tandem/services/workersvc"
)

// logFlags are the logging flags every command shares.
type logFlags struct{ level string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error (logs are JSON on stderr)")
}

func (l *logFlags) logger(stderr io.Writer, service string) (*slog.Logger, error) {
	return telemetry.NewLogger(stderr, l.level, service)
}

func runFrontend(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	var cfg frontendsvc.Config
	var lf logFlags
	fs := newFlagSet("frontend", "frontend --router ADDR [flags]", stderr)
	cfg.RegisterFlags(fs)
	lf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	consulFromEnv(&cfg.Consul, getenv)
	log, err := lf.logger(stderr, "frontend")
	if err != nil {
		return err
	}
	env, err := process.NewEnv(log, cfg.Serve.TLS)
	if err != nil {
		return err
	}
	svc, err := frontendsvc.Start(env, cfg)
	if err != nil {
		return err
	}
	log.Info("frontend listening", "addr", svc.Addr())
	return svc.Run(ctx)
}

func runRouter(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	var cfg routersvc.Config
	var lf logFlags
	fs := newFlagSet("router", "router --decode-workers A,B [--prefill-workers C,D] [flags]", stderr)
	cfg.RegisterFlags(fs)
	lf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	consulFromEnv(&cfg.Consul, getenv)
	log, err := lf.logger(stderr, "router")
	if err != nil {
		return err
	}
	env, err := process.NewEnv(log, cfg.Serve.TLS)
	if err != nil {
		return err
	}
	svc, err := routersvc.Start(env, cfg)
	if err != nil {
		return err
	}
	log.Info("router listening", "addr", svc.Addr())
	return svc.Run(ctx)
}

func runDecode(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	return runWorker(ctx, "decode", args, getenv, stderr)
}

func runPrefill(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	return runWorker(ctx, "prefill", args, getenv, stderr)
}

func runWorker(ctx context.Context, mode string, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg workersvc.Config
	var lf logFlags
	fs := newFlagSet(mode, mode+" [flags]", stderr)
	cfg.RegisterFlags(fs, mode)
	lf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	consulFromEnv(&cfg.Consul, getenv)
	log, err := lf.logger(stderr, mode)
	if err != nil {
		return err
	}
	process.Version = version()
	env, err := process.NewEnv(log, cfg.Serve.TLS)
	if err != nil {
		return err
	}
	svc, err := workersvc.Start(ctx, env, cfg)
	if err != nil {
		return err
	}
	attrs := []any{"addr", svc.Addr(), "worker_id", svc.ID, "mode", svc.Mode.String()}
	if kv := svc.KVAddr(); kv != "" {
		attrs = append(attrs, "kv_transfer_addr", kv)
	}
	log.Info("worker listening", attrs...)
	return svc.Run(ctx)
}

// consulFromEnv takes the agent's address from CONSUL_HTTP_ADDR, as Consul's own
// tools do, when --consul (or TANDEM_CONSUL) is not given.
func consulFromEnv(c *consul.Config, getenv func(string) string) {
	if c.Addr == "" {
		c.Addr = strings.TrimPrefix(getenv("CONSUL_HTTP_ADDR"), "http://")
	}
}
