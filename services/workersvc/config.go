// Package workersvc runs a worker: an engine behind the decode service (decode and
// aggregated modes) or the prefill service (prefill mode), plus the worker service
// every mode serves.
package workersvc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/models"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/process"
)

// Config is a worker's flags.
type Config struct {
	Serve process.Serve
	// ID names the worker to the router; empty means a generated one.
	ID            string
	Mode          string
	Engine        string
	Model         string
	ServedName    string
	Tokenizer     string
	ChatTemplate  string
	ContextLength int
	Seed          uint64
	NumBlocks     int
	BlockSize     int
	SimTimeScale  float64
	SimProfile    string
	SimLink       string
	// SimMaxBatchedTokens and SimMaxSeqs replace the profile's scheduler limits
	// (vLLM's max_num_batched_tokens, max_num_seqs) when positive.
	SimMaxBatchedTokens int
	SimMaxSeqs          int
	PrefillWorkers      services.List

	// Decode is the decode service's config (decode and aggregated modes); its
	// WorkerID and Mode are the worker's, set when it starts.
	Decode decode.Config
	// MaxQueuedTokens bounds a prefill worker's queue (prefill.Config).
	MaxQueuedTokens int

	// KVListen is a prefill worker's KV transfer port (process.NewKVPort), and
	// KVAdvertisePort the port decode workers are told to dial for it (0: the one
	// it listens on).
	KVListen        string
	KVAdvertisePort int
	// LendPrefill: an aggregated worker also serves Prefill for decode workers
	// (a role-flexible worker), with a KV transfer port like a prefill worker's.
	LendPrefill bool

	// GPU is the engine server a vllm, trtllm or sglang worker fronts.
	GPU GPUEngine
	// onEngineWait hears why each attempt to reach a starting GPU engine server
	// failed, for the worker's /readyz.
	onEngineWait func(error)
	// tracer, when set, makes a span of every request to a GPU engine server and
	// sends it the W3C traceparent (the process exports traces).
	tracer trace.TracerProvider

	Consul consul.Config
}

// DefaultModel is what a worker serves when not told: the embedded trained model.
const DefaultModel = models.Stories260KName

// RegisterFlags registers the worker's flags; mode is the default --mode.
func (c *Config) RegisterFlags(fs *flag.FlagSet, mode string) {
	c.Serve.RegisterFlags(fs, "127.0.0.1:0")
	fs.StringVar(&c.ID, "id", "", "worker id the router and logs know this worker by (default: mode and a random suffix)")
	fs.Var(&c.PrefillWorkers, "prefill-workers", "decode mode: comma-separated prefill worker addresses (static discovery)")
	fs.BoolVar(&c.LendPrefill, "lend-prefill", false, "aggregated mode: also serve remote prefills for decode workers over this worker's "+
		"engine, and register as a prefill worker too; the router ranks it after idle prefill workers by its decode load")
	fs.StringVar(&c.KVListen, "kv-listen", "", "prefill mode (or aggregated with --lend-prefill): address of the KV transfer port, Prefill on grpc-go's transport for bulk data "+
		"(default: --listen's host and port + 1, a free port when --listen's is 0; \"off\": Prefill on the main port only)")
	fs.IntVar(&c.KVAdvertisePort, "kv-advertise-port", 0,
		"prefill mode (or --lend-prefill): the KV transfer port decode workers reach, when a port mapping or proxy makes it differ from --kv-listen's (0: the same)")
	c.Consul.RegisterFlags(fs)
	c.GPU.RegisterFlags(fs)
	c.RegisterRoleFlags(fs, mode)
}

// RegisterRoleFlags registers the flags that say what the worker serves and how
// it decides, the ones tandem up takes too; RegisterFlags adds where it listens
// and how it finds its peers. mode is the default --mode.
func (c *Config) RegisterRoleFlags(fs *flag.FlagSet, mode string) {
	fs.StringVar(&c.Mode, "mode", mode, "aggregated, decode (conditional disaggregation) or prefill")
	fs.StringVar(&c.Engine, "engine", "native", "engine: native (pure-Go transformer), sim (timing model, no compute), "+
		"or a GPU engine server at --engine-url: vllm, trtllm or sglang")
	fs.StringVar(&c.Model, "model", DefaultModel, "vllm, trtllm, sglang: the engine's served model id (default: the one it serves); "+
		"native engine: the model to serve: "+models.Stories260KName+
		" (embedded, a real trained model), the path of a GGUF file (llama or qwen2 architecture), or a random-weight benchmark shape: "+
		strings.Join(native.Models(), ", "))
	fs.StringVar(&c.ServedName, "served-model-name", "", "the model id clients name in requests (default: the GGUF's general.name, else its file name)")
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "a Hugging Face tokenizer.json (or, for vllm, trtllm and sglang, a GGUF file) the frontend "+
		"tokenizes with, instead of the model file's own tokenizer; required with a GPU engine")
	fs.StringVar(&c.ChatTemplate, "chat-template", "", "a file holding the model's Jinja chat template, published in the model card "+
		"(default: the GGUF's own; a tokenizer.json carries none)")
	fs.IntVar(&c.ContextLength, "max-model-len", 0, "cap the model's context length in tokens (0: the model's own, or the GPU engine's max_model_len)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the model's weights (or of the sim engine's tokens)")
	fs.IntVar(&c.NumBlocks, "kv-blocks", 0, "KV cache blocks (0: the engine's default; a GPU engine's from its metrics)")
	fs.IntVar(&c.BlockSize, "block-size", 16, "tokens per KV block; must match the frontend's and router's, and a GPU engine's own")
	fs.Float64Var(&c.SimTimeScale, "sim-time-scale", 1, "sim engine: multiply every modelled time by this (0: no waiting)")
	fs.StringVar(&c.SimProfile, "sim-profile", "mocker", "sim engine: the device's timing, one of "+strings.Join(sim.ProfileNames(), ", ")+
		" (docs/SIM.md gives their sources)")
	fs.StringVar(&c.SimLink, "sim-link", "rdma", "sim engine: the KV transfer a remote prefill's KV takes to arrive: rdma, tcp or none (docs/SIM.md)")
	fs.IntVar(&c.SimMaxBatchedTokens, "sim-max-batched-tokens", 0, "sim engine: tokens one step may run, decodes and prefill chunks (vLLM's "+
		"max_num_batched_tokens; 0: the profile's, 8192); smaller bounds how much a local prefill stretches each step")
	fs.IntVar(&c.SimMaxSeqs, "sim-max-seqs", 0, "sim engine: sequences one step may run (vLLM's max_num_seqs; 0: the profile's, 256)")
	c.Decode = decode.DefaultConfig()
	d := &c.Decode
	fs.StringVar((*string)(&d.Params.Policy), "policy", string(d.Params.Policy),
		"decode mode: local-or-remote prefill policy, one of "+policyNames())
	fs.IntVar(&d.Params.ShortPrefillThreshold, "short-prefill-threshold", d.Params.ShortPrefillThreshold,
		"decode mode: prefill locally when prompt tokens minus cached tokens are at most this (threshold policy, and cost policy until warmed up)")
	fs.Float64Var(&d.Params.ITLWeight, "itl-weight", d.Params.ITLWeight,
		"decode mode, cost policy: weight of the stall a local prefill inflicts on each running sequence")
	fs.BoolVar(&d.Params.EnforceDisagg, "enforce-disagg", d.Params.EnforceDisagg,
		"decode mode: fail a request whose remote prefill fails instead of prefilling it locally")
	fs.IntVar(&d.Params.MaxPrefillQueueTokens, "max-prefill-queue-tokens", d.Params.MaxPrefillQueueTokens,
		"decode mode: prefill locally when the best prefill worker already has this many tokens queued (0: no limit)")
	fs.IntVar(&d.Params.LocalMaxRunning, "local-max-running", d.Params.LocalMaxRunning,
		"decode mode, load policy: prefill a long prompt locally while at most this many sequences decode here")
	fs.Float64Var(&d.Params.LocalMaxKVUsage, "local-max-kv-usage", d.Params.LocalMaxKVUsage,
		"decode mode, load policy: ... and while at most this fraction of the KV pool is in use")
	fs.IntVar(&d.Params.LocalMaxTokens, "local-max-tokens", d.Params.LocalMaxTokens,
		"decode mode, load policy: ... and only prompts of at most this many effective tokens (0: no cap)")
	fs.StringVar(&d.Params.SLOPrefer, "slo-prefer", d.Params.SLOPrefer,
		"decode mode, slo policy: where a prompt goes that both paths serve within the objectives: local (prefill here while its TTFT is met) "+
			"or faster (the path with the lower projected TTFT, once both are measured) (Consul KV slo_prefer)")
	fs.Float64Var(&d.Params.TTFTSLOMs, flagTTFTSLO, d.Params.TTFTSLOMs,
		"decode mode, slo policy and --"+flagShedTTFTFactor+": time-to-first-token objective in ms of this worker's clock (a sim engine's: modelled ms x --sim-time-scale)")
	fs.Float64Var(&d.Params.ShedTTFTFactor, flagShedTTFTFactor, d.Params.ShedTTFTFactor,
		"decode mode, any policy: refuse a request at once (ResourceExhausted, reason ttft_unmeetable; the frontend tries another worker, "+
			"then answers 429) when its projected TTFT on every path it could take is above this times --"+flagTTFTSLO+
			"; never on a path not yet measured (0: off; Consul KV shed_ttft_factor)")
	fs.Float64Var(&d.Params.TPOTSLOMs, "tpot-slo-ms", d.Params.TPOTSLOMs,
		"decode mode, slo policy: objective for the mean gap between a request's tokens after the first, in ms of this worker's clock (0: off, with --tbt-slo-ms set)")
	fs.Float64Var(&d.Params.TBTSLOMs, "tbt-slo-ms", d.Params.TBTSLOMs,
		"decode mode, slo policy: objective for the Mooncake paper's time between tokens, the mean of a request's longest tenth of gaps, in ms of this worker's clock (0: off)")
	fs.DurationVar(&d.MinRemoteDeadline, "remote-deadline-min", d.MinRemoteDeadline,
		"decode mode: least time a remote prefill is given (the deadline is 3x its estimate + 1s)")
	fs.DurationVar(&d.MaxRemoteDeadline, "remote-deadline-max", d.MaxRemoteDeadline, "decode mode: most time a remote prefill is given before falling back")
	fs.IntVar(&d.MaxRunning, flagMaxRunning, d.MaxRunning, "decode mode: requests served or queued at once (0: unbounded); "+
		"past it new ones get ResourceExhausted and the frontend tries another worker, then answers 429")
	fs.Float64Var(&d.MaxKVUsage, flagMaxKVUsage, d.MaxKVUsage, "decode mode: refuse new requests (ResourceExhausted; the frontend "+
		"tries another worker, then answers 429) while more than this fraction of the engine's KV blocks are in use (0: no limit)")
	fs.IntVar(&d.MaxWaitingTokens, flagMaxWaitingTokens, d.MaxWaitingTokens, "decode mode: refuse new requests (ResourceExhausted; the "+
		"frontend tries another worker, then answers 429) while more than this many prompt tokens wait for prefill in the engine (0: no limit)")
	fs.BoolVar(&d.KVPrecheck, flagKVPrecheck, d.KVPrecheck, "decode mode: refuse a request decided remote (ResourceExhausted, reason "+
		"kv_blocks) before asking a prefill worker when this worker's KV pool has fewer blocks not held by running sequences than "+
		"the prompt's uncached KV needs, instead of after the prefill when its import finds no blocks")
	fs.IntVar(&c.MaxQueuedTokens, "max-queued-tokens", 0, "prefill mode (and --lend-prefill): prompt tokens accepted and not yet prefilled (0: unbounded); "+
		"past it requests are refused so decode workers prefill locally")
}

// DecodeConfig is the decode service's config for worker id in mode.
func (c *Config) DecodeConfig(id string, mode workerv1.WorkerMode) decode.Config {
	d := c.Decode
	d.WorkerID, d.Mode = id, mode
	return d
}

// WorkerMode parses the --mode value.
func (c *Config) WorkerMode() (workerv1.WorkerMode, error) {
	switch strings.ToLower(c.Mode) {
	case "aggregated":
		return workerv1.WorkerMode_WORKER_MODE_AGGREGATED, nil
	case "decode":
		return workerv1.WorkerMode_WORKER_MODE_DECODE, nil
	case "prefill":
		return workerv1.WorkerMode_WORKER_MODE_PREFILL, nil
	}
	return 0, fmt.Errorf("--mode %q: want aggregated, decode or prefill", c.Mode)
}

// servesPrefill: a prefill worker, or an aggregated one lending prefill.
func (c *Config) servesPrefill(mode workerv1.WorkerMode) bool {
	return mode == workerv1.WorkerMode_WORKER_MODE_PREFILL || (c.LendPrefill && mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED)
}

// Validate checks the flags.
func (c *Config) Validate() error {
	mode, err := c.WorkerMode()
	if err != nil {
		return err
	}
	if c.Decode.MaxRunning < 0 {
		return fmt.Errorf("--max-running-requests %d: want 0 (no bound) or more", c.Decode.MaxRunning)
	}
	if f := c.Decode.Params.ShedTTFTFactor; f > 0 && c.Decode.Params.TTFTSLOMs <= 0 && mode != workerv1.WorkerMode_WORKER_MODE_PREFILL {
		return fmt.Errorf("--%s %g needs a TTFT objective: set --%s above 0", flagShedTTFTFactor, f, flagTTFTSLO)
	}
	if mode != workerv1.WorkerMode_WORKER_MODE_PREFILL {
		if err := c.DecodeConfig("validate", mode).Validate(); err != nil {
			return fmt.Errorf("decode flags: %w", err)
		}
	}
	if err := c.Consul.ValidateServing(c.Serve.TLS.Enabled()); err != nil {
		return err
	}
	if c.BlockSize <= 0 {
		return errors.New("--block-size must be positive")
	}
	if c.KVAdvertisePort < 0 || c.KVAdvertisePort > 65535 {
		return fmt.Errorf("--kv-advertise-port %d: want a port number, or 0", c.KVAdvertisePort)
	}
	if c.LendPrefill && mode != workerv1.WorkerMode_WORKER_MODE_AGGREGATED {
		return fmt.Errorf("--lend-prefill is for aggregated workers (--mode aggregated), not --mode %s", c.Mode)
	}
	if c.LendPrefill && isGPU(c.Engine) {
		// Its engine server runs in one disaggregation role, set where it starts.
		return fmt.Errorf("--lend-prefill needs the native or sim engine, not --engine %s", c.Engine)
	}
	if !c.servesPrefill(mode) && (c.KVListen != "" || c.KVAdvertisePort != 0) {
		return errors.New("--kv-listen and --kv-advertise-port are for prefill workers (--mode prefill, or aggregated with --lend-prefill)")
	}
	if c.KVListen == process.KVListenOff && c.KVAdvertisePort != 0 {
		return errors.New("--kv-advertise-port with --kv-listen off: there is no KV transfer port to advertise")
	}
	if c.KVListen != "" && c.KVListen != process.KVListenOff {
		if _, _, err := net.SplitHostPort(c.KVListen); err != nil {
			return fmt.Errorf("--kv-listen %q: want host:port or %q: %v", c.KVListen, process.KVListenOff, err)
		}
	}
	if c.NumBlocks < 0 {
		return errors.New("--kv-blocks must not be negative")
	}
	if c.SimTimeScale < 0 {
		return errors.New("--sim-time-scale must not be negative")
	}
	if c.SimMaxBatchedTokens < 0 || c.SimMaxSeqs < 0 {
		return fmt.Errorf("--sim-max-batched-tokens %d / --sim-max-seqs %d: must not be negative", c.SimMaxBatchedTokens, c.SimMaxSeqs)
	}
	if c.Tokenizer != "" {
		if _, err := loadTokenizer(c.Tokenizer); err != nil {
			return fmt.Errorf("--tokenizer %s: %w", c.Tokenizer, err)
		}
	}
	if c.ChatTemplate != "" {
		if _, err := os.ReadFile(c.ChatTemplate); err != nil {
			return fmt.Errorf("--chat-template: %w", err)
		}
	}
	if !isGPU(c.Engine) && (c.GPU.URL != "" || c.GPU.KVEvents.Endpoint != "" || c.GPU.Bootstrap != "") {
		return fmt.Errorf("--engine-url, --kv-events-endpoint and --engine-bootstrap are for GPU engines (%s), not --engine %s",
			strings.Join(GPUEngines, ", "), c.Engine)
	}
	if !isGPU(c.Engine) && c.GPU.Record != "" {
		return fmt.Errorf("--engine-record records the exchanges with a GPU engine (%s), not --engine %s", strings.Join(GPUEngines, ", "), c.Engine)
	}
	switch c.Engine {
	case "vllm", "trtllm", "sglang":
		return c.validateGPU()
	case "sim":
		if _, err := sim.ConfigFor(c.SimProfile, c.SimLink); err != nil {
			return fmt.Errorf("--sim-profile / --sim-link: %w", err)
		}
	case "native":
		if c.Model == "" {
			return errors.New("--model must not be empty")
		}
		if c.ContextLength < 0 {
			return fmt.Errorf("--max-model-len %d must not be negative", c.ContextLength)
		}
	default:
		return fmt.Errorf("--engine %q: want native, sim, vllm, trtllm or sglang", c.Engine)
	}
	return nil
}

// NewEngine builds the configured engine; a GPU engine's is waited for until it
// serves (--engine-wait) or ctx ends.
func (c *Config) NewEngine(ctx context.Context, log *slog.Logger) (engine.Engine, error) {
	switch c.Engine {
	case "vllm", "trtllm", "sglang":
		return c.gpuEngine(ctx, log)
	case "native":
		nc := native.Config{Model: c.Model, ContextLength: c.ContextLength, Seed: c.Seed,
			NumBlocks: c.NumBlocks, BlockSize: c.BlockSize, Logger: log}
		if c.Tokenizer != "" {
			// Constraints are compiled against the tokenizer the frontend uses.
			tok, err := loadTokenizer(c.Tokenizer)
			if err != nil {
				return nil, fmt.Errorf("--tokenizer: %w", err)
			}
			nc.Tokenizer = tok
		}
		return native.New(nc)
	case "sim":
		sc, err := sim.ConfigFor(c.SimProfile, c.SimLink)
		if err != nil {
			return nil, err
		}
		sc.Seed, sc.BlockSize, sc.TimeScale = c.Seed, c.BlockSize, c.SimTimeScale
		if c.SimMaxBatchedTokens > 0 {
			sc.Profile.MaxBatchedTokens = c.SimMaxBatchedTokens
		}
		if c.SimMaxSeqs > 0 {
			sc.Profile.MaxNumSeqs = c.SimMaxSeqs
		}
		// The pool holds the profile's KV tokens unless --kv-blocks says otherwise.
		sc.NumBlocks = max(1, sc.Profile.KVTokens/max(1, c.BlockSize))
		if c.NumBlocks > 0 {
			sc.NumBlocks = c.NumBlocks
		}
		// A modelled GPU model's context (Llama-3.1-8B's is 131,072) is what a
		// trace's long prompts need; the sim's own default is 8,192.
		if c.ContextLength > 0 {
			sc.ContextLength = c.ContextLength
		}
		return sim.New(sc)
	}
	return nil, fmt.Errorf("--engine %q: unknown", c.Engine)
}

// policyNames lists decode's policies for the --policy help, so a new policy
// shows there without editing this file.
func policyNames() string {
	names := make([]string, len(decode.Policies))
	for i, p := range decode.Policies {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}
