package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"strings"
	"testing"
	"time"
)

// tbtWorker is a decode worker's live streams under the slo policy with only
// TTFT and TBT objectives (the Mooncake paper's 30 s and 100 ms), a plain step
// of 10 ms and an engine step budget of 2,048 tokens.
type tbtWorker struct {
	t   *testing.T
	ss  estimate.Streams
	now time.Time
}

func newTBTWorker(t *testing.T) *tbtWorker { return &tbtWorker{t: t, now: time.Unix(1000, 0)} }

// decoding starts a sequence of maxTokens that has emitted one token then one
// per gap (milliseconds), ending now.
func (w *tbtWorker) decoding(maxTokens int, gapsMS ...float64) {
	var total time.Duration
	for _, g := range gapsMS {
		total += time.Duration(g * float64(time.Millisecond))
	}
	first := w.now.Add(-total)
	lv, _ := w.ss.Add(first.Add(-100*time.Millisecond), maxTokens)
	at := first
	lv.Token(at)
	for _, g := range gapsMS {
		at = at.Add(time.Duration(g * float64(time.Millisecond)))
		lv.Token(at)
	}
}

// decide asks for a local prefill of tokens that stalls for stall seconds.
func (w *tbtWorker) decide(tokens int, stall float64) choice {
	c, _ := w.decideWith(tokens, stall, 0, estimate.StepAt{})
	return c
}

// decideWith is decide with compute seconds of the stall the prompt's own and
// the step model's plain step.
func (w *tbtWorker) decideWith(tokens int, stall, compute float64, plain estimate.StepAt) (choice, estimate.Slack) {
	p := Params{Policy: PolicySLO, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 64}, SLOParams: SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}
	if err := p.Validate(); err != nil {
		w.t.Fatal(err)
	}
	est := estimate.Estimate{Warm: true, LocalWarm: true, RemoteWarm: true, Local: stall, LocalPrefill: stall, Remote: 1, Chunk: 2048}
	s := situation{prompt: tokens, est: est}
	s.slack = w.ss.Slack(w.now, p.TTFTSLOMs/1e3, p.TPOTSLOMs/1e3, p.TBTSLOMs/1e3, 0.01,
		estimate.Stretch{Steps: estimate.Chunks(tokens, est.Chunk), Stall: stall, Compute: compute, Plain: plain})
	return decide(p, s), s.slack
}

func gaps(n int, ms float64) []float64 {
	g := make([]float64, n)
	for i := range g {
		g[i] = ms
	}
	return g
}

func wantChoice(t *testing.T, name string, c choice, remote bool, reason string) {
	t.Helper()
	if c.remote != remote || c.reason != reason {
		t.Errorf("%s: remote=%v %q (%s), want remote=%v %q", name, c.remote, c.reason, c.detail, remote, reason)
	}
}

// An 8,192-token prompt stalls the batch for 4 steps of 90 ms. A sequence of
// 101 tokens (TBT: the mean of its 10 longest gaps) that has decoded at 10 ms
// takes it: (4·90 + 6·10)/10 = 42 ms. One that already had 8 gaps of 90 ms
// (74 ms, within the objective) would end at 90 ms, past 80 % of it: remote.
// Its mean gap stays far below 100 ms either way, which is why TPOT let it be.
func TestSLOTBTSeesPastStalls(t *testing.T) {
	fresh := newTBTWorker(t)
	fresh.decoding(101, gaps(40, 10)...)
	c := fresh.decide(8192, 0.36)
	wantChoice(t, "fresh", c, false, "slo_local_fits")
	if !strings.Contains(c.detail, "projects 42.0ms") || !strings.Contains(c.detail, "4 steps of 90.0ms") {
		t.Errorf("detail %q: want the projected TBT 42.0ms and the 4 steps of 90.0ms", c.detail)
	}
	scarred := newTBTWorker(t)
	scarred.decoding(101, append(gaps(32, 10), gaps(8, 90)...)...)
	c = scarred.decide(8192, 0.36)
	wantChoice(t, "after 8 long gaps", c, true, "slo_remote_tbt_budget")
	if !strings.Contains(c.detail, "projects 90.0ms") {
		t.Errorf("detail %q: want the projected TBT 90.0ms", c.detail)
	}
}

// The same stall is 4 of the 100 longest gaps of a 1,001-token answer but 2
// of 2 of a 21-token one: the short one refuses it.
func TestSLOTBTShortOutputsAreSensitive(t *testing.T) {
	long := newTBTWorker(t)
	long.decoding(1001, gaps(4, 10)...)
	wantChoice(t, "1,001 tokens", long.decide(8192, 0.36), false, "slo_local_fits")
	short := newTBTWorker(t)
	short.decoding(21, gaps(4, 10)...)
	wantChoice(t, "21 tokens", short.decide(8192, 0.36), true, "slo_remote_tbt_budget")
	// A single step's stall is one of its two longest gaps: (90 + 10)/2.
	wantChoice(t, "21 tokens, one step", short.decide(2048, 0.09), false, "slo_local_fits")
}

// Nothing decoding here: any stall is nobody's, whatever its length.
func TestSLOTBTIdleGoesLocal(t *testing.T) {
	wantChoice(t, "idle", newTBTWorker(t).decide(100000, 5), false, "slo_local_fits")
}

// A sequence past the objective already (its two longest gaps 150 ms) sets no
// budget: the stall goes to the one that can still meet it. But a worker
// whose every sequence is lost does not stall them further.
func TestSLOTBTLostSequencesSetNoBudget(t *testing.T) {
	w := newTBTWorker(t)
	w.decoding(21, 10, 150, 150)
	wantChoice(t, "only a lost one", w.decide(8192, 0.36), true, "slo_remote_tbt_budget")
	w.decoding(1001, gaps(4, 10)...)
	c := w.decide(8192, 0.36)
	wantChoice(t, "a lost one and a long one", c, false, "slo_local_fits")
	if sl := w.ss.Slack(w.now, 30, 0, 0.1, 0.01, estimate.Stretch{Steps: 4, Stall: 0.36}); sl.Lost != 1 || sl.Decoding != 2 {
		t.Errorf("%+v: want 1 lost of 2", sl)
	}
}

// An engine that reports no step budget has the whole stall land in one gap.
func TestSLOTBTUnknownBudgetIsOneGap(t *testing.T) {
	w := newTBTWorker(t)
	w.decoding(101, gaps(40, 10)...)
	sl := w.ss.Slack(w.now, 30, 0, 0.1, 0.01, estimate.Stretch{Steps: estimate.Chunks(8192, 0), Stall: 0.36})
	// (360 + 9·10)/10
	if sl.Steps != 1 || sl.Stretched != 1 || sl.TBT < 0.045-1e-9 || sl.TBT > 0.045+1e-9 {
		t.Errorf("%+v: want one stretched gap of 360 ms, TBT 45 ms", sl)
	}
}

// The 80 % share is a margin. When the remote path is projected to miss the
// TTFT objective (40 s against 30 s) and the local one meets it, a projected
// TBT of 90 ms (within 100 ms, past 80) goes local; one past the whole
// objective still goes remote.
func TestSLOTBTMarginGivesWayToACertainTTFTMiss(t *testing.T) {
	decideRemote := func(w *tbtWorker, remote float64) choice {
		p := Params{Policy: PolicySLO, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 64}, SLOParams: SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}
		est := estimate.Estimate{Warm: true, LocalWarm: true, RemoteWarm: true, Local: 0.36, LocalPrefill: 0.36, Remote: remote, Chunk: 2048}
		s := situation{prompt: 8192, est: est}
		s.slack = w.ss.Slack(w.now, p.TTFTSLOMs/1e3, 0, p.TBTSLOMs/1e3, 0.01, estimate.Stretch{Steps: 4, Stall: 0.36})
		return decide(p, s)
	}
	scarred := newTBTWorker(t)
	scarred.decoding(101, append(gaps(32, 10), gaps(8, 90)...)...)
	wantChoice(t, "remote meets its TTFT", decideRemote(scarred, 1), true, "slo_remote_tbt_budget")
	wantChoice(t, "remote misses its TTFT", decideRemote(scarred, 40), false, "slo_local_tbt_margin")
	worse := newTBTWorker(t)
	worse.decoding(101, append(gaps(8, 110), gaps(32, 10)...)...) // 90 ms with no stall, 106 with it
	wantChoice(t, "past the whole objective", decideRemote(worse, 40), true, "slo_remote_tbt_budget")
}

// A prompt that fits in the last step of the prefills already waiting here
// adds no stretched gap to anyone: the sequences' TBT is what the queue makes
// it either way, so the TBT rule does not send it away. One that needs a step
// of its own still goes remote.
func TestSLOTBTPromptThatAddsNoStep(t *testing.T) {
	decideQueued := func(queued, tokens int) choice {
		w := newTBTWorker(t)
		w.decoding(101, append(gaps(32, 10), gaps(8, 90)...)...) // 90 ms projected with any stall: past 80
		p := Params{Policy: PolicySLO, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 64}, SLOParams: SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}
		est := estimate.Estimate{Warm: true, LocalWarm: true, RemoteWarm: true, Local: 0.2, LocalPrefill: 0.2, Remote: 1, Chunk: 2048}
		s := situation{prompt: tokens, est: est, localQueued: queued}
		s.slack = w.ss.Slack(w.now, p.TTFTSLOMs/1e3, 0, p.TBTSLOMs/1e3, 0.01, estimate.Stretch{Steps: estimate.Chunks(queued+tokens, 2048), Stall: 0.2})
		return decide(p, s)
	}
	c := decideQueued(3000, 64)
	wantChoice(t, "64 tokens into a queue of 3,000", c, false, "slo_local_fits")
	if !strings.Contains(c.detail, "fits in the last step of the 3000 tokens waiting here") {
		t.Errorf("detail %q: want the reason the share was passed", c.detail)
	}
	wantChoice(t, "2,048 tokens into a queue of 3,000", decideQueued(3000, 2048), true, "slo_remote_tbt_budget")
	wantChoice(t, "64 tokens, nothing queued", decideQueued(0, 64), true, "slo_remote_tbt_budget")
}
