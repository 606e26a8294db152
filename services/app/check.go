package app

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"

	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/models"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/telemetry"
)

// Check is what a role's command checks before it serves, without serving:
// every flag's value and combination, as the role's Validate sees them, and the
// files the flags name (TLS, the Consul token, API keys, a tokenizer, a chat
// template, a GGUF model), which Run would read only as it starts. It listens
// on nothing, calls no peer and loads no model (tandem ROLE --check-config, which
// the Helm chart's tests run over every command the chart renders).
func Check(cfg Config, target string) error {
	if _, err := telemetry.NewLogger(io.Discard, cfg.LogLevel, ""); err != nil {
		return fmt.Errorf("--log-level %q: %w", cfg.LogLevel, err)
	}
	var serve process.Serve
	var cc consul.Config
	files := map[string]string{}
	switch target {
	case Frontend:
		if err := cfg.Frontend.Validate(); err != nil {
			return err
		}
		serve, cc = cfg.Frontend.Serve, cfg.Frontend.Consul
		files["--api-keys-file"] = cfg.Frontend.APIKeysFile
	case Router:
		if err := cfg.Router.Validate(); err != nil {
			return err
		}
		serve, cc = cfg.Router.Serve, cfg.Router.Consul
	case Decode, Prefill:
		// Validate reads --tokenizer and --chat-template itself.
		if err := cfg.Worker.Validate(); err != nil {
			return err
		}
		serve, cc = cfg.Worker.Serve, cfg.Worker.Consul
		if cfg.Worker.Engine == "native" && !builtinModel(cfg.Worker.Model) {
			files["--model"] = cfg.Worker.Model
		}
	default:
		return fmt.Errorf("--check-config checks a role's command (frontend, router, decode, prefill), not %q", target)
	}
	if _, _, err := net.SplitHostPort(serve.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", serve.Listen, err)
	}
	if cc.Advertise != "" {
		if _, _, err := net.SplitHostPort(cc.Advertise); err != nil {
			return fmt.Errorf("--advertise %q: %w", cc.Advertise, err)
		}
	}
	if err := serve.TLS.Validate(); err != nil {
		return err
	}
	// What process.NewEnv and NewServer load: the certificates, key and CA.
	if _, err := serve.TLS.Client(); err != nil {
		return err
	}
	if _, err := serve.TLS.Server(!serve.Public); err != nil {
		return err
	}
	files["--consul-token-file"] = cc.TokenFile
	var errs []error
	for _, flag := range slices.Sorted(maps.Keys(files)) {
		if p := files[flag]; p != "" {
			if err := readable(p); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", flag, err))
			}
		}
	}
	return errors.Join(errs...)
}

// builtinModel says whether the native engine's --model names a model of its
// own rather than a file.
func builtinModel(name string) bool {
	return name == models.Stories260KName || slices.Contains(native.Models(), name)
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}
