package frontendsvc

import (
	"context"
	"io"

	"github.com/tandem-serve/tandem/console"
	"github.com/tandem-serve/tandem/frontend"
	"github.com/tandem-serve/tandem/services/admin"
	"github.com/tandem-serve/tandem/services/process"
)

// newConsole is the frontend's console: fed with every request's outcome, its
// data behind the frontend's API keys, and, with Consul, a policy form that
// writes where tandem config set does.
func newConsole(cfg Config, f *frontend.Frontend, env *process.Env) *console.Console {
	opts := console.Options{
		Model: func() string {
			if m := f.Model(); m != nil {
				return m.ID
			}
			return ""
		},
		Guard:   f.RequireKey,
		Version: process.Version(),
		Log:     env.Logger,
	}
	if cfg.Consul.Enabled() {
		opts.Policy = consulPolicy{addr: cfg.Consul.Addr, tokenFile: cfg.Consul.TokenFile}
	}
	c := console.New(opts)
	f.OnOutcome(c.Record)
	return c
}

// consulPolicy is tandem config set's code path: the same check, the same keys.
type consulPolicy struct{ addr, tokenFile string }

func (p consulPolicy) Check(target string, value []byte) error {
	return admin.CheckPolicy(target, value)
}

func (p consulPolicy) Set(ctx context.Context, target string, value []byte) error {
	return admin.SetPolicy(ctx, p.addr, p.tokenFile, target, value, io.Discard)
}
