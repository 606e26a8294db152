package bench

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDoer answers every request after wait with four tokens, and records how many
// were in flight at once.
type fakeDoer struct {
	wait     time.Duration
	block    bool // wait for the context instead
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	calls    atomic.Int32
}

func (f *fakeDoer) Do(ctx context.Context, r Request) Result {
	f.calls.Add(1)
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if f.block {
		<-ctx.Done()
		return Result{Class: r.Class, Err: ctx.Err().Error()}
	}
	time.Sleep(f.wait)
	return Result{Class: r.Class, TTFT: f.wait / 2, E2E: f.wait, OutputTokens: 4, ITL: []time.Duration{f.wait / 6, f.wait / 6, f.wait / 6}}
}

// constWorkload returns the same request every time.
type constWorkload struct{ done atomic.Int32 }

func (*constWorkload) Name() string { return "const" }
func (*constWorkload) Next(*rand.Rand) (Request, error) {
	return Request{Class: "c", Prompt: "p", MaxTokens: 4, PromptTokens: 1}, nil
}
func (w *constWorkload) Done(Request, *Result) { w.done.Add(1) }

func TestRunClosedLoopSendsExactlyTheRequestsAsked(t *testing.T) {
	d := &fakeDoer{wait: 2 * time.Millisecond}
	wl := &constWorkload{}
	var progressCalls int
	rep, err := Run(context.Background(), Config{Concurrency: 3, Requests: 25, Progress: func(Progress) { progressCalls++ }}, wl, d)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Requests != 25 || rep.Overall.Completed != 25 || d.calls.Load() != 25 || wl.done.Load() != 25 {
		t.Errorf("%d requests, %d completed, %d calls, %d Done; want 25 each", rep.Overall.Requests, rep.Overall.Completed, d.calls.Load(), wl.done.Load())
	}
	if m := d.maxSeen.Load(); m > 3 {
		t.Errorf("%d requests in flight at once with concurrency 3", m)
	}
	if progressCalls != 25 || rep.Interrupted || len(rep.Classes) != 1 || rep.Classes[0].Class != "c" {
		t.Errorf("progress calls %d, interrupted %v, classes %+v", progressCalls, rep.Interrupted, rep.Classes)
	}
	if rep.Overall.OutputTokens != 100 || rep.Overall.ITL.N != 75 || len(rep.Requests) != 25 {
		t.Errorf("output tokens %d, ITL n %d, records %d; want 100, 75, 25", rep.Overall.OutputTokens, rep.Overall.ITL.N, len(rep.Requests))
	}
}

func TestRunExcludesTheWarmup(t *testing.T) {
	d := &fakeDoer{wait: 5 * time.Millisecond}
	rep, err := Run(context.Background(), Config{Concurrency: 2, Requests: 6, Warmup: 30 * time.Millisecond}, &constWorkload{}, d)
	if err != nil {
		t.Fatal(err)
	}
	warm := 0
	for _, r := range rep.Results {
		if r.Warmup {
			warm++
			if r.Start >= 30*time.Millisecond {
				t.Errorf("a request sent at %v counted as warm-up", r.Start)
			}
		} else if r.Start < 30*time.Millisecond {
			t.Errorf("a request sent at %v, in the warm-up, was counted", r.Start)
		}
	}
	// The first requests go out at once, inside the warm-up.
	if warm == 0 || rep.Overall.Requests != 6 || len(rep.Results) != 6+warm {
		t.Errorf("%d warm-up requests, %d measured of %d results; want some, 6", warm, rep.Overall.Requests, len(rep.Results))
	}
}

func TestRunStopsAtTheDuration(t *testing.T) {
	d := &fakeDoer{wait: time.Millisecond}
	rep, err := Run(context.Background(), Config{Concurrency: 2, Duration: 50 * time.Millisecond}, &constWorkload{}, d)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Completed == 0 || rep.Interrupted {
		t.Errorf("completed %d, interrupted %v", rep.Overall.Completed, rep.Interrupted)
	}
	for _, r := range rep.Results {
		if r.Start > 50*time.Millisecond {
			t.Errorf("a request was sent at %v, after the 50ms window", r.Start)
		}
	}
}

func TestRunInterruptedReportsWhatItHas(t *testing.T) {
	d := &fakeDoer{block: true}
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	go func() {
		for d.inFlight.Load() < 4 {
			time.Sleep(time.Millisecond)
		}
		once.Do(cancel)
	}()
	rep, err := Run(ctx, Config{Concurrency: 4, Requests: 100}, &constWorkload{}, d)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Overall.Aborted != 4 || rep.Overall.Failed != 0 || rep.Overall.Completed != 0 {
		t.Errorf("interrupted %v, aborted %d, failed %d, completed %d; want true, 4, 0, 0",
			rep.Interrupted, rep.Overall.Aborted, rep.Overall.Failed, rep.Overall.Completed)
	}
}

func TestRunPoissonIsBoundedAndCapped(t *testing.T) {
	d := &fakeDoer{wait: 3 * time.Millisecond}
	rep, err := Run(context.Background(), Config{Rate: 2000, Concurrency: 2, Requests: 20, Seed: 3}, &constWorkload{}, d)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Completed != 20 || d.maxSeen.Load() > 2 {
		t.Errorf("completed %d, max in flight %d", rep.Overall.Completed, d.maxSeen.Load())
	}
}

func TestPoissonGapsAreReproducibleWithTheRightMean(t *testing.T) {
	a, b := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
	var sum time.Duration
	const n = 20000
	for range n {
		g := poissonGap(a, 4)
		if g != poissonGap(b, 4) {
			t.Fatal("the same seed gave different arrival gaps")
		}
		sum += g
	}
	// Mean 1/4 s; the standard error at n = 20000 is 1.8 ms, the seed is fixed.
	if mean := sum / n; mean < 240*time.Millisecond || mean > 260*time.Millisecond {
		t.Errorf("mean gap %v, want about 250ms", mean)
	}
}

func TestRunValidates(t *testing.T) {
	for _, c := range []Config{{Requests: 1}, {Concurrency: 1}, {Concurrency: -1, Requests: 1}, {Rate: -1, Requests: 1}} {
		if _, err := Run(context.Background(), c, &constWorkload{}, &fakeDoer{}); err == nil {
			t.Errorf("Run accepted %+v", c)
		}
	}
}

// TestRunAgainstAStreamingServer runs the real client, a shared-prefix workload
// and the runner against an in-process SSE server.
func TestRunAgainstAStreamingServer(t *testing.T) {
	s := &sseServer{pieces: []string{" a", " b", " c"}, path: "local"}
	var mu sync.Mutex
	ts := httptest.NewServer(lockedHandler(&mu, s))
	defer ts.Close()
	p := testPrompts(t)
	wl, err := NewSharedPrefix(p, SharedPrefixConfig{PrefixTokens: 16, TurnTokens: 4, OutputTokens: 3, Turns: 2, Conversations: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{URL: ts.URL, Endpoint: EndpointChat, HTTP: NewHTTPClient(2), Tokenizer: p.Tokenizer()}
	slo, _ := ParseSLO("ttft=60000")
	rep, err := Run(context.Background(), Config{Concurrency: 2, Requests: 8, SLO: slo}, wl, c)
	if err != nil {
		t.Fatal(err)
	}
	o := rep.Overall
	if o.Completed != 8 || o.PrefillPaths["local"] != 8 || *o.GoodRequests != 8 || o.OutputTokens != 8*4 {
		t.Errorf("overall %+v", o)
	}
	if len(rep.Classes) != 2 || rep.Classes[0].Class != "turn-1" || rep.Classes[1].Class != "turn-2" {
		t.Errorf("classes %+v", rep.Classes)
	}
}

func lockedHandler(mu *sync.Mutex, s *sseServer) *lockedSSE { return &lockedSSE{mu: mu, s: s} }

type lockedSSE struct {
	mu *sync.Mutex
	s  *sseServer
}

func (l *lockedSSE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.ServeHTTP(w, r)
}

// scheduledWorkload hands out requests due at given times, then ends.
type scheduledWorkload struct {
	at   []time.Duration
	next int
}

func (*scheduledWorkload) Name() string { return "scheduled" }
func (w *scheduledWorkload) Next(*rand.Rand) (Request, error) {
	if w.next >= len(w.at) {
		return Request{}, ErrWorkloadDone
	}
	w.next++
	return Request{Class: "c", Prompt: "p", MaxTokens: 4, At: w.at[w.next-1]}, nil
}
func (*scheduledWorkload) Done(Request, *Result) {}

func TestRunScheduledSendsAtEachRequestsTimeAndEndsWithTheWorkload(t *testing.T) {
	at := []time.Duration{0, 0, 40 * time.Millisecond, 90 * time.Millisecond}
	d := &fakeDoer{wait: time.Millisecond}
	rep, err := Run(context.Background(), Config{Scheduled: true}, &scheduledWorkload{at: at}, d)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Completed != 4 || !rep.Scheduled {
		t.Fatalf("%d completed (scheduled %v), want 4", rep.Overall.Completed, rep.Scheduled)
	}
	starts := make([]time.Duration, 0, 4)
	for _, r := range rep.Results {
		starts = append(starts, r.Start)
	}
	slices.Sort(starts)
	// Never early; how late a busy machine makes it is not asserted.
	for i, s := range starts {
		if s < at[i] {
			t.Errorf("request %d sent at %v, before its time %v", i, s, at[i])
		}
	}
	if err := (Config{Scheduled: true, Rate: 2}).Validate(); err == nil {
		t.Error("a rate with a schedule was accepted")
	}
}
