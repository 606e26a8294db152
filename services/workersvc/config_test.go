package workersvc

import (
	"flag"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/services/consul"
)

// The slo policy's objectives come from flags and from Consul KV, and a policy
// without them is refused with the field's name.
func TestSLOPolicyParams(t *testing.T) {
	parse := func(args ...string) Config {
		t.Helper()
		var cfg Config
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		cfg.RegisterFlags(fs, "decode")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse("--policy", "slo", "--ttft-slo-ms", "500", "--tpot-slo-ms", "7.5")
	if p := cfg.Decode.Params; p.Policy != decode.PolicySLO || p.TTFTSLOMs != 500 || p.TPOTSLOMs != 7.5 {
		t.Errorf("params %+v", p)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid slo flags: %v", err)
	}
	cfg = parse("--policy", "slo", "--tpot-slo-ms", "0")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "tpot_slo_ms") {
		t.Errorf("slo with no TPOT objective: %v", err)
	}
	p, err := consul.Overlay(decode.DefaultParams(), []byte(`{"policy":"slo","ttft_slo_ms":500,"tpot_slo_ms":7.5}`), decode.Params.Validate)
	if err != nil || p.Policy != decode.PolicySLO || p.TTFTSLOMs != 500 || p.TPOTSLOMs != 7.5 {
		t.Errorf("Consul KV: %+v, %v", p, err)
	}
	if _, err := consul.Overlay(decode.DefaultParams(), []byte(`{"policy":"slo","ttft_slo_ms":-5}`), decode.Params.Validate); err == nil {
		t.Error("a negative TTFT objective from Consul KV was accepted")
	}
}
