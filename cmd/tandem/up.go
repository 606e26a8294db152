package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/frontendsvc"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/routersvc"
	"github.com/tandem-serve/tandem/services/tlsconf"
	"github.com/tandem-serve/tandem/services/workersvc"
)

type runner interface {
	Addr() string
	Run(ctx context.Context) error
}

// runUp starts every service in this process on loopback: the workers first, on free
// ports, then the router over them, then the frontend on --http-addr.
func runUp(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("up", "up [flags]", stderr)
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "address of the frontend: OpenAI HTTP API, Connect and gRPC")
	nPrefill := fs.Int("prefill", 1, "prefill workers to run")
	nDecode := fs.Int("decode", 1, "decode workers to run")
	// up runs several services, so it takes each one's flags except those it sets
	// itself: every listener is on loopback, and the router and workers find each
	// other without being told.
	var worker workersvc.Config
	wfs := newFlagSet("worker", "", stderr)
	worker.RegisterFlags(wfs, "decode")
	// Consul and TLS are for deployments across hosts; up runs on loopback.
	consulFlags := []string{"consul", "advertise", "check-interval", "check-timeout", "deregister-after", "tags", "tls-cert", "tls-key", "tls-ca", "check-tls-verify", "check-tls-server-name"}
	merge(fs, wfs, append([]string{"listen", "id", "prefill-workers", "kv-listen", "kv-advertise-port"}, consulFlags...)...)
	var front frontendsvc.Config
	ffs := newFlagSet("frontend", "", stderr)
	front.RegisterFlags(ffs)
	merge(fs, ffs, append([]string{"listen", "router", "drain-timeout"}, consulFlags...)...)
	var routing router.Params
	routersvc.RegisterParamFlags(fs, &routing)
	var lf logFlags
	lf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if *nDecode < 1 || *nPrefill < 0 {
		return errors.New("up: --decode must be at least 1 and --prefill at least 0")
	}
	process.Version = version()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		started  []runner
	)
	launch := func(r runner) {
		started = append(started, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	stopAll := func(err error) error {
		cancel()
		wg.Wait()
		if err != nil {
			return err
		}
		return firstErr
	}

	var decodeAddrs, prefillAddrs []string
	for i := range *nPrefill + *nDecode {
		cfg := worker
		cfg.Serve.Listen = "127.0.0.1:0"
		cfg.Mode, cfg.ID = "prefill", fmt.Sprintf("prefill-%d", i)
		if i >= *nPrefill {
			cfg.Mode, cfg.ID = worker.Mode, fmt.Sprintf("decode-%d", i-*nPrefill)
			cfg.PrefillWorkers = prefillAddrs
			if cfg.Mode == "prefill" {
				return stopAll(errors.New("up: --mode is the decode workers' mode: decode or aggregated"))
			}
		}
		log, err := lf.logger(stderr, cfg.Mode)
		if err != nil {
			return stopAll(err)
		}
		w, err := workersvc.Start(ctx, mustEnv(log), cfg)
		if err != nil {
			return stopAll(fmt.Errorf("%s: %w", cfg.ID, err))
		}
		if cfg.Mode == "prefill" {
			prefillAddrs = append(prefillAddrs, w.Addr())
		} else {
			decodeAddrs = append(decodeAddrs, w.Addr())
		}
		launch(w)
	}

	rlog, _ := lf.logger(stderr, "router")
	rcfg := routersvc.Config{DecodeWorkers: decodeAddrs, PrefillWorkers: prefillAddrs, BlockSize: worker.BlockSize, Params: routing}
	rcfg.Serve.Listen, rcfg.Serve.Grace = "127.0.0.1:0", worker.Serve.Grace
	r, err := routersvc.Start(mustEnv(rlog), rcfg)
	if err != nil {
		return stopAll(fmt.Errorf("router: %w", err))
	}
	launch(r)

	flog, _ := lf.logger(stderr, "frontend")
	front.Router = r.Addr()
	front.Serve.Listen, front.Serve.Grace = *httpAddr, worker.Serve.Grace
	f, err := frontendsvc.Start(mustEnv(flog), front)
	if err != nil {
		return stopAll(fmt.Errorf("frontend: %w", err))
	}
	launch(f)

	if err := waitServing(ctx, started); err != nil {
		return stopAll(err)
	}
	ulog, _ := lf.logger(stderr, "up")
	ulog.Info("services ready", "frontend", f.Addr(), "router", r.Addr(), "decode_workers", decodeAddrs, "prefill_workers", prefillAddrs)
	fmt.Fprintf(stdout, "ready: http://%s\n", f.Addr())
	// The other services' ports are free ones; say them, for tandem workers, route,
	// drain and health, and for their /metrics.
	fmt.Fprintf(stdout, "router %s, decode workers %s, prefill workers %s (tandem workers --router %s)\n",
		r.Addr(), cmp.Or(strings.Join(decodeAddrs, " "), "none"), cmp.Or(strings.Join(prefillAddrs, " "), "none"), r.Addr())
	<-ctx.Done()
	return stopAll(nil)
}

// waitServing polls each service's grpc.health.v1 over the network until all say
// SERVING, exactly as an external checker would see them.
func waitServing(ctx context.Context, rs []runner) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range rs {
		for {
			st, err := checkHealth(ctx, r.Addr(), "", time.Second)
			if err == nil && st == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("up: %s did not become SERVING: %v %v", r.Addr(), st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// merge defines src's flags in dst, except skip, sharing their values.
func merge(dst, src *flag.FlagSet, skip ...string) {
	src.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(skip, f.Name) && dst.Lookup(f.Name) == nil {
			dst.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// mustEnv is a plaintext process environment; up serves only loopback.
func mustEnv(log *slog.Logger) *process.Env {
	env, err := process.NewEnv(log, tlsconf.Config{})
	if err != nil {
		panic(err) // an empty TLS config cannot fail
	}
	return env
}
