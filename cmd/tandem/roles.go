package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tandem-serve/tandem/services/app"
	"github.com/tandem-serve/tandem/services/consul"
)

// role is the command that runs target (a role, or app.Up for all of them).
func role(target, synopsis string) func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
		var cfg app.Config
		fs := newFlagSet(target, synopsis, stderr)
		cfg.RegisterFlags(fs, target)
		var check bool
		if target != app.Up {
			fs.BoolVar(&check, "check-config", false, "check the flags, the environment and the files they name as the service would "+
				"at start, print 'configuration ok' and exit without serving (exit 1 with the first problem)")
		}
		if err := parse(fs, args, getenv); err != nil {
			return err
		}
		for _, c := range []*consul.Config{&cfg.Frontend.Consul, &cfg.Router.Consul, &cfg.Worker.Consul} {
			consulFromEnv(c, getenv)
		}
		cfg.Tracing.TracingFromEnv(getenv)
		if check {
			if err := app.Check(cfg, target); err != nil {
				return err
			}
			_, err := fmt.Fprintf(stdout, "tandem %s: configuration ok\n", target)
			return err
		}
		return app.Run(ctx, cfg, target, stdout, stderr)
	}
}

// consulFromEnv takes the agent's address from CONSUL_HTTP_ADDR, as Consul's own
// tools do, when --consul (or TANDEM_CONSUL) is not given.
func consulFromEnv(c *consul.Config, getenv func(string) string) {
	if c.Addr == "" {
		c.Addr = strings.TrimPrefix(getenv("CONSUL_HTTP_ADDR"), "http://")
	}
}
