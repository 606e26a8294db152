package bench

import (
	"strings"
	"testing"
)

// Plan refuses settings that make no sense together, naming the flag at fault,
// and resolves a mix's loads and its default of no prefix reuse.
func TestBoundRunPlan(t *testing.T) {
	base := func() BoundRun {
		return BoundRun{Window: TraceWindow{BlockSize: DefaultTraceBlockSize, TokenScale: 1}, Speedups: "1", Profile: "h100-llama8b",
			Devices: 4, TBTMS: 100, Caches: CacheUnbounded, MaxUtil: 1}
	}
	for _, tc := range []struct {
		name string
		edit func(*BoundRun)
		want string
	}{
		{"neither", func(r *BoundRun) {}, "--trace FILE or --mix SPEC"},
		{"both", func(r *BoundRun) { r.Trace, r.Mix = "t.jsonl", "1:64/64" }, "--trace FILE or --mix SPEC"},
		{"rate with a trace", func(r *BoundRun) { r.Trace, r.Rates = "t.jsonl", "100" }, "--rate and --duration are for --mix"},
		{"trace setting with a mix", func(r *BoundRun) { r.Mix, r.Rates, r.TraceSettings = "1:64/64", "100", []string{"trace-limit"} }, "--trace-limit is for --trace"},
		{"mix without rates", func(r *BoundRun) { r.Mix = "1:64/64" }, "--mix needs --rate"},
		{"utilisation", func(r *BoundRun) { r.Trace, r.MaxUtil = "t.jsonl", 1.5 }, "--max-utilisation"},
		{"negative batch", func(r *BoundRun) { r.Trace, r.MaxBatchedTokens = "t.jsonl", -1 }, "--sim-max-batched-tokens"},
		{"zero speedup", func(r *BoundRun) { r.Trace, r.Speedups = "t.jsonl", "0" }, "--trace-speedup 0"},
		{"bad rate", func(r *BoundRun) { r.Mix, r.Rates = "1:64/64", "x" }, `--rate "x"`},
		{"profile", func(r *BoundRun) { r.Trace, r.Profile = "t.jsonl", "nope" }, "nope"},
		{"devices", func(r *BoundRun) { r.Trace, r.Devices = "t.jsonl", 0 }, "--devices 0"},
	} {
		r := base()
		tc.edit(&r)
		if _, err := r.Plan(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	r := base()
	r.Mix, r.Rates = "1:64/64", "100,200"
	p, err := r.Plan()
	if err != nil || len(p.Loads) != 2 || p.Loads[1] != 200 || len(p.Caches) != 1 || p.Caches[0] != CacheNone {
		t.Errorf("a mix's plan: %+v, %v; want loads 100, 200 and no prefix reuse", p, err)
	}
}
