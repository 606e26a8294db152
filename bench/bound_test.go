package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine/sim"
)

// boundDevice is a device whose costs are round numbers: prefill 0.1 ms a token
// and 10 ms a step of up to 100 tokens; a decode step 5 ms plus 20 ms at a full
// pool of 100 blocks of 16 tokens; at most 4 sequences a step.
func boundDevice(devices int, tbt float64, cache string) BoundConfig {
	return BoundConfig{
		Config: sim.Config{BlockSize: 16, NumBlocks: 100, Profile: sim.Profile{Name: "round",
			PrefillB: 0.1, PrefillC: 10, DecodeB: 20, DecodeC: 5, MaxNumSeqs: 4, MaxBatchedTokens: 100}},
		Devices: devices, TBTMS: tbt, BlockSize: 64, Cache: cache,
	}
}

// Two requests, no reuse, priced by hand.
func TestDemandByHand(t *testing.T) {
	reqs := []TraceRequest{
		{Line: 1, InputLength: 100, OutputLength: 11, HashIDs: []int64{1, 2}},
		{Line: 2, At: time.Second, InputLength: 50, OutputLength: 1, HashIDs: []int64{3}},
	}
	d, err := ComputeDemand(reqs, boundDevice(1, 100, CacheNone))
	if err != nil {
		t.Fatal(err)
	}
	// Prefill: 0.1 x 100 + 10 x 100/100 = 20 ms, and 5 + 5 = 10 ms.
	// Decode: 10 tokens (the first came with the prefill) of a 111-token
	// sequence, 7 blocks; 4 a step (MaxNumSeqs) use 28 of 100 blocks: a step of
	// 5 + 20 x 0.28 = 10.6 ms, 2.65 ms a token. The one-token answer decodes nothing.
	if !near(d.PrefillMS, 30) || !near(d.DecodeMS, 26.5) || !near(d.TotalMS(), 56.5) || d.DecodeTokens != 10 || d.OverTBT != 0 {
		t.Errorf("demand %+v: want prefill 30 ms, decode 26.5 ms over 10 tokens", d)
	}
	// Fixed parts: prefill 15 ms of steps, decode 10 x 5/4 = 12.5; shared, the
	// smaller is paid once.
	if !near(d.SharedMS(), 44) {
		t.Errorf("shared %g ms, want 44", d.SharedMS())
	}
	// Over 1 s: 56.5 ms a second at speedup 1, 113 at 2; one device is full at
	// speedup 1000/56.5, a device at 0.8 at 0.8 of that.
	rows := d.Rows([]float64{1, 2}, 1)
	if !near(rows[1].Total, 0.113) || !near(rows[1].Utilisation, 0.113) || !near(rows[0].Rate, 2) {
		t.Errorf("rows %+v", rows)
	}
	if x := d.Crossing(1, 1, false); !near(x, 1000/56.5) {
		t.Errorf("crossing %g, want %g", x, 1000/56.5)
	}
	if x := d.Crossing(2, 0.8, true); !near(x, 2*0.8*1000/44) {
		t.Errorf("crossing at 0.8 of 2 devices, shared: %g", x)
	}
	var out bytes.Buffer
	if err := WriteBound(&out, d, boundDevice(1, 100, CacheNone), []float64{1, 2}, BoundOutput{MaxUtil: 0.8, Markdown: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 2 | 4.00 | 0.06 | 0.05 | 0.11 | 0.11 | 0.09 | 0.09 |",
		"utilisation 1 of 1 devices at speedup 17.70 (35.40 requests/s); 22.73 with fixed costs shared: no placement serves more",
		"utilisation 0.8 of 1 devices at speedup 14.16"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The TBT objective caps the batch; a sequence too long for it even alone is
// counted and priced alone.
func TestDemandTBT(t *testing.T) {
	reqs := []TraceRequest{{InputLength: 100, OutputLength: 11, HashIDs: []int64{1, 2}}, {At: time.Second, InputLength: 1, OutputLength: 1, HashIDs: []int64{3}}}
	// TBT 8 ms: 5 + 1.4 b <= 8 keeps b at 2 (7.8 ms, 3.9 a token).
	d, err := ComputeDemand(reqs, boundDevice(1, 8, CacheNone))
	if err != nil || !near(d.DecodeMS, 39) || d.OverTBT != 0 {
		t.Errorf("TBT 8: decode %g ms, %d over (%v), want 39 and 0", d.DecodeMS, d.OverTBT, err)
	}
	// TBT 4 ms: one alone takes 6.4.
	d, err = ComputeDemand(reqs, boundDevice(1, 4, CacheNone))
	if err != nil || !near(d.DecodeMS, 64) || d.OverTBT != 1 {
		t.Errorf("TBT 4: decode %g ms, %d over (%v), want 64 and 1", d.DecodeMS, d.OverTBT, err)
	}
}

// The cache modes: unbounded credits each leading block an earlier request had
// (not the first sight of it, not one after a miss), whole KV blocks short of
// the last token; pool forgets what its LRU evicted.
func TestDemandPrefixCache(t *testing.T) {
	reqs := []TraceRequest{
		{InputLength: 128, OutputLength: 1, HashIDs: []int64{1, 2}},
		{At: time.Second, InputLength: 128, OutputLength: 1, HashIDs: []int64{1, 3}}, // block 1 again: 64
		{At: time.Second, InputLength: 128, OutputLength: 1, HashIDs: []int64{4, 1}}, // 1 after a miss: 0
		{At: time.Second, InputLength: 128, OutputLength: 1, HashIDs: []int64{1, 2}}, // both, less the last token's KV block: 112
	}
	cached := map[string]int{CacheNone: 0, CacheUnbounded: 176,
		// Two trace blocks a device: block 2 is evicted by the second request.
		CachePool: 128}
	for mode, want := range cached {
		cfg := boundDevice(1, 100, mode)
		cfg.Config.NumBlocks = 8
		d, err := ComputeDemand(reqs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if d.CachedTokens != want || d.PromptTokens != 512 {
			t.Errorf("%s: %d of %d tokens cached, want %d of 512", mode, d.CachedTokens, d.PromptTokens, want)
		}
		// The credited tokens are not prefilled: 0.1 ms and 0.1 ms of step each.
		if got := d.PrefillMS; !near(got, 0.2*float64(512-want)) {
			t.Errorf("%s: prefill %g ms, want %g", mode, got, 0.2*float64(512-want))
		}
	}
	// Two devices of one trace block each, which keeps a prompt's first block:
	// the second and fourth requests go where block 1 is (64 tokens each), the
	// third, with nothing cached anywhere, to the device that prefilled less.
	cfg := boundDevice(2, 100, CachePool)
	cfg.Config.NumBlocks = 4
	if d, err := ComputeDemand(reqs, cfg); err != nil || d.CachedTokens != 128 {
		t.Errorf("two pools of one block: %d cached (%v), want 128", d.CachedTokens, err)
	}
	// On one such device the third request evicts block 1: the fourth finds nothing.
	cfg.Devices = 1
	if d, err := ComputeDemand(reqs, cfg); err != nil || d.CachedTokens != 64 {
		t.Errorf("one pool of one block: %d cached (%v), want 64", d.CachedTokens, err)
	}
}

func TestBoundConfigValidate(t *testing.T) {
	for _, c := range []BoundConfig{boundDevice(0, 100, CacheNone), boundDevice(1, 0, CacheNone), boundDevice(1, 100, "lru")} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if _, err := ComputeDemand([]TraceRequest{{InputLength: 1, OutputLength: 1, HashIDs: []int64{1}}}, boundDevice(1, 100, CacheNone)); err == nil {
		t.Error("a window of one instant: no error")
	}
}
