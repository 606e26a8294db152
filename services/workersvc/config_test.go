package workersvc

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/services"
	"github.com/tandem-serve/tandem/services/consul"
)

// parseDecodeFlags is a decode worker's Config from args, as its flags set it.
func parseDecodeFlags(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "decode")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The slo policy's objectives come from flags and from Consul KV, and a policy
// without them is refused with the field's name.
func TestSLOPolicyParams(t *testing.T) {
	cfg := parseDecodeFlags(t, "--policy", "slo", "--ttft-slo-ms", "500", "--tpot-slo-ms", "7.5")
	if p := cfg.Decode.Params; p.Policy != decode.PolicySLO || p.TTFTSLOMs != 500 || p.TPOTSLOMs != 7.5 {
		t.Errorf("params %+v", p)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid slo flags: %v", err)
	}
	cfg = parseDecodeFlags(t, "--policy", "slo", "--tpot-slo-ms", "0")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "tpot_slo_ms") {
		t.Errorf("slo with no TPOT objective: %v", err)
	}
	// TBT alone is an inter-token objective enough, from a flag or TANDEM_TBT_SLO_MS.
	cfg = parseDecodeFlags(t, "--policy", "slo", "--ttft-slo-ms", "30000", "--tpot-slo-ms", "0", "--tbt-slo-ms", "100")
	if p := cfg.Decode.Params; p.TBTSLOMs != 100 || p.TPOTSLOMs != 0 {
		t.Errorf("tbt flag: %+v", p)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("slo with TBT and no TPOT: %v", err)
	}
	var envCfg Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	envCfg.RegisterFlags(fs, "decode")
	env := map[string]string{"TANDEM_TBT_SLO_MS": "80"}
	if err := services.ApplyEnv(fs, func(k string) string { return env[k] }); err != nil || envCfg.Decode.Params.TBTSLOMs != 80 {
		t.Errorf("TANDEM_TBT_SLO_MS=80: %v, tbt %g", err, envCfg.Decode.Params.TBTSLOMs)
	}
	if p, err := consul.Overlay(decode.DefaultParams(), []byte(`{"policy":"slo","ttft_slo_ms":30000,"tpot_slo_ms":0,"tbt_slo_ms":100}`),
		decode.Params.Validate); err != nil || p.TBTSLOMs != 100 {
		t.Errorf("Consul KV tbt_slo_ms: %+v, %v", p, err)
	}
	for _, bad := range []string{`{"policy":"slo","tbt_slo_ms":-1}`, `{"policy":"slo","tbt_slo":100}`,
		`{"policy":"slo","tpot_slo_ms":0,"tbt_slo_ms":0}`} {
		if _, err := consul.Overlay(decode.DefaultParams(), []byte(bad), decode.Params.Validate); err == nil {
			t.Errorf("Consul KV %s accepted", bad)
		}
	}
	p, err := consul.Overlay(decode.DefaultParams(), []byte(`{"policy":"slo","ttft_slo_ms":500,"tpot_slo_ms":7.5}`), decode.Params.Validate)
	if err != nil || p.Policy != decode.PolicySLO || p.TTFTSLOMs != 500 || p.TPOTSLOMs != 7.5 {
		t.Errorf("Consul KV: %+v, %v", p, err)
	}
	if _, err := consul.Overlay(decode.DefaultParams(), []byte(`{"policy":"slo","ttft_slo_ms":-5}`), decode.Params.Validate); err == nil {
		t.Error("a negative TTFT objective from Consul KV was accepted")
	}
}

// The TTFT shed's factor and the KV pre-check come from flags (and the
// factor from Consul KV, as a policy param); a factor with no TTFT objective is
// refused naming both flags; a shed names its flag to the client.
func TestShedFlags(t *testing.T) {
	if d := parseDecodeFlags(t).Decode; d.Params.ShedTTFTFactor != 0 || !d.KVPrecheck {
		t.Errorf("defaults: shed factor %g, precheck %v; want 0 (off) and on", d.Params.ShedTTFTFactor, d.KVPrecheck)
	}
	cfg := parseDecodeFlags(t, "--shed-ttft-factor", "1.5", "--kv-precheck=false", "--policy", "always-remote")
	if d := cfg.Decode; d.Params.ShedTTFTFactor != 1.5 || d.KVPrecheck {
		t.Errorf("flags: %+v", d)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid shed flags: %v", err)
	}
	cfg = parseDecodeFlags(t, "--shed-ttft-factor", "1", "--ttft-slo-ms", "0")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--shed-ttft-factor 1") || !strings.Contains(err.Error(), "--ttft-slo-ms") {
		t.Errorf("a shed factor with no TTFT objective: %v", err)
	}
	cfg = parseDecodeFlags(t, "--shed-ttft-factor", "-1")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "shed_ttft_factor") {
		t.Errorf("a negative shed factor: %v", err)
	}
	p, err := consul.Overlay(decode.DefaultParams(), []byte(`{"shed_ttft_factor":2}`), decode.Params.Validate)
	if err != nil || p.ShedTTFTFactor != 2 {
		t.Errorf("Consul KV shed_ttft_factor: %+v, %v", p, err)
	}
	if _, err := consul.Overlay(decode.DefaultParams(), []byte(`{"shed_ttft_factor":1,"ttft_slo_ms":0}`), decode.Params.Validate); err == nil {
		t.Error("Consul KV: a shed factor with no TTFT objective accepted")
	}
	if p, err := consul.Overlay(decode.DefaultParams(), []byte(`{"slo_prefer":"faster"}`), decode.Params.Validate); err != nil ||
		p.SLOPrefer != decode.SLOPreferFaster {
		t.Errorf("Consul KV slo_prefer: %+v, %v", p, err)
	}
	if _, err := consul.Overlay(decode.DefaultParams(), []byte(`{"slo_prefer":"fastest"}`), decode.Params.Validate); err == nil ||
		!strings.Contains(err.Error(), "slo_prefer") {
		t.Errorf("Consul KV: slo_prefer fastest: %v", err)
	}
	shed := connect.NewError(connect.CodeResourceExhausted, &decode.LimitError{Worker: "d1", Reason: decode.RejectTTFTUnmeetable,
		Field: "ShedTTFTFactor", Limit: "1", Detail: "TTFT unmeetable: projected ..."})
	d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "TTFT_UNMEETABLE", Domain: decode.ErrorDomain})
	shed.AddDetail(d)
	err = flagNamed(shed)
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.HasSuffix(err.Error(), "decode worker d1 refuses the request: TTFT unmeetable: projected ... (--shed-ttft-factor 1)") ||
		!errors.As(err, &ce) || len(ce.Details()) != 1 {
		t.Errorf("a shed as the client sees it: %v; want the flag named and its ErrorInfo kept", err)
	}
}
