package decode_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// The data behind --short-prefill-threshold's default: with the native tiny engine
// (the default of tandem up) on both sides, real gRPC between them, the time to
// first token of a request prefilled locally and of one prefilled remotely, by
// effective prompt length, on an idle decode worker and on one already decoding
// other sequences, and the stall a local (or remote) prefill inflicts on those
// sequences: the figures the default short-prefill threshold was chosen from
// (docs/BENCHMARKS.md).
//
//	go test -run '^$' -bench ShortPrefillThreshold -benchtime 30x ./decode/

var (
	thresholdTokens  = []int{16, 32, 64, 128, 256, 512, 1024, 2048}
	thresholdRunning = []int{0, 2, 4, 8, 32}
)

// thresholdRig is a decode worker and a prefill worker, both native tiny with the
// engines' defaults, as tandem up runs them. One decode engine is served three
// ways: always-local and always-remote for the measured requests, and always-local
// for the background sequences.
type thresholdRig struct {
	local, remote, background decodev1connect.DecodeServiceClient
	close                     func()
}

func startThresholdRig(b *testing.B) *thresholdRig {
	b.Helper()
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	must := func(err error) {
		if err != nil {
			closeAll()
			b.Fatal(err)
		}
	}
	deng, err := native.New(native.Config{Model: "tiny", Seed: 1, Logger: quietLog()})
	must(err)
	closers = append(closers, func() { deng.Close() })
	peng, err := native.New(native.Config{Model: "tiny", Seed: 1, Logger: quietLog()})
	must(err)
	closers = append(closers, func() { peng.Close() })

	// The prefill worker as services/workersvc builds it, serving Prefill on a KV
	// transfer port, and a grpc-go client dialled as a decode worker dials it.
	psvc, err := prefill.New(prefill.Config{WorkerID: "p0", ChunkBytes: 1 << 20, MaxLease: 30 * time.Second}, peng, quietLog(), prometheus.NewRegistry())
	must(err)
	kvAddr, stop, err := serveKV(psvc)
	must(err)
	closers = append(closers, stop)
	cc, err := grpc.NewClient(kvAddr, append(handoff.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	must(err)
	closers = append(closers, func() { cc.Close() })
	pf := &staticPrefillers{}
	pf.add("p0", handoff.GRPCClient(cc))

	serve := func(p decode.Params) decodev1connect.DecodeServiceClient {
		svc, err := decode.New(decode.Config{
			WorkerID: "d0", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: p,
			MinRemoteDeadline: 30 * time.Second, MaxRemoteDeadline: time.Minute,
		}, deng, pf, quietLog(), prometheus.NewRegistry())
		must(err)
		mux := http.NewServeMux()
		mux.Handle(decodev1connect.NewDecodeServiceHandler(svc))
		srv := rpctest.NewServer(b, mux)
		closers = append(closers, srv.Close)
		return decodev1connect.NewDecodeServiceClient(rpctest.Client(b), srv.URL, connect.WithGRPC())
	}
	return &thresholdRig{
		local:      serve(decode.Params{Policy: decode.PolicyAlwaysLocal}),
		remote:     serve(decode.Params{Policy: decode.PolicyAlwaysRemote}),
		background: serve(decode.Params{Policy: decode.PolicyAlwaysLocal}),
		close:      closeAll,
	}
}

// seqTimes records when each token of one running sequence reached its client, and
// when the sequence was restarted.
type seqTimes struct {
	mu       sync.Mutex
	times    []time.Time
	restarts []time.Time
}

func (s *seqTimes) restart(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restarts = append(s.restarts, t)
}

// restartedWithin reports whether the sequence was restarted (a prefill of its own)
// between from and to.
func (s *seqTimes) restartedWithin(from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.restarts, func(t time.Time) bool { return !t.Before(from) && !t.After(to) })
}

func (s *seqTimes) add(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.times) > 4096 {
		s.times = slices.Delete(s.times, 0, 2048)
	}
	s.times = append(s.times, t)
}

func (s *seqTimes) snapshot() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.times)
}

// background keeps n sequences decoding on the decode worker, each restarted with
// a fresh prompt when it reaches max_tokens. Their length keeps them all, and the
// measured request, within the engine's default pool (1024 blocks when measured), so that nothing is
// preempted.
type background struct {
	seqs   []*seqTimes
	cancel func()
	wg     sync.WaitGroup
}

var promptSeed atomic.Int64

// freshPrompt is a prompt of n tokens that shares no block with any other.
func freshPrompt(n int) []uint32 { return prompt(int(promptSeed.Add(1))+1000, n) }

func startBackground(b *testing.B, c decodev1connect.DecodeServiceClient, n int) *background {
	ctx, cancel := context.WithCancel(context.Background())
	bg := &background{cancel: cancel}
	maxTokens := uint32(min(1000, 11000/n))
	for i := range n {
		s := &seqTimes{}
		bg.seqs = append(bg.seqs, s)
		bg.wg.Go(func() {
			for ctx.Err() == nil {
				s.restart(time.Now())
				stream, err := c.Generate(ctx, connect.NewRequest(&decodev1.GenerateRequest{
					RequestId: fmt.Sprintf("bg%d", i), PromptTokenIds: freshPrompt(16), MaxTokens: maxTokens,
					Sampling: &workerv1.SamplingParams{Temperature: 1, Seed: uint64(i)},
				}))
				if err != nil {
					return
				}
				for stream.Receive() {
					if len(stream.Msg().GetTokenIds()) > 0 {
						s.add(time.Now())
					}
				}
				stream.Close()
			}
		})
	}
	// Wait until every sequence is decoding.
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range bg.seqs {
		for len(s.snapshot()) < 10 {
			if time.Now().After(deadline) {
				bg.stop()
				b.Fatal("background sequences do not decode")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return bg
}

func (bg *background) stop() {
	bg.cancel()
	bg.wg.Wait()
}

// ttft runs one request with max_tokens 1 and returns when its token arrived.
func ttft(b *testing.B, c decodev1connect.DecodeServiceClient, p []uint32, wantPath decodev1.PrefillPath) time.Time {
	stream, err := c.Generate(context.Background(), connect.NewRequest(&decodev1.GenerateRequest{
		RequestId: "measured", PromptTokenIds: p, MaxTokens: 1,
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer stream.Close()
	var first time.Time
	var d *decodev1.PrefillDecision
	for stream.Receive() {
		if len(stream.Msg().GetTokenIds()) > 0 && first.IsZero() {
			first = time.Now()
		}
		if stream.Msg().GetPrefill() != nil {
			d = stream.Msg().GetPrefill()
		}
	}
	if err := stream.Err(); err != nil {
		b.Fatal(err)
	}
	if d.GetPath() != wantPath || int(d.GetEffectiveTokens()) != len(p) || first.IsZero() {
		b.Fatalf("path %v with %d effective tokens (%s), want %v with %d", d.GetPath(), d.GetEffectiveTokens(), d.GetDetail(), wantPath, len(p))
	}
	return first
}

// baseITL is the running sequences' mean inter-token latency in the quiet period
// before start. It reports false when one of them was restarted (a prefill of its
// own) since then.
func baseITL(seqs []*seqTimes, start time.Time, quiet time.Duration) (time.Duration, bool) {
	var span time.Duration
	var count int
	for _, s := range seqs {
		if s.restartedWithin(start.Add(-2*quiet), start) {
			return 0, false
		}
		ts := s.snapshot()
		for i := 1; i < len(ts); i++ {
			if ts[i-1].After(start.Add(-quiet)) && !ts[i].After(start) {
				span += ts[i].Sub(ts[i-1])
				count++
			}
		}
	}
	if count == 0 {
		return 0, false
	}
	return span / time.Duration(count), true
}

// stall is the time the running sequences lost to a request that started at start
// and had its first token at end, summed over the sequences, given their ITL before
// it. For each sequence it takes its last token before start and its first token
// after end (plus half an ITL, so that it belongs to the step after the prefill)
// and compares the time between them with as many gaps of the ITL: anchored on real
// tokens, it has no phase error. It reports false when a running sequence was
// restarted meanwhile, or has not produced its token after end yet.
func stall(seqs []*seqTimes, start, end time.Time, itl time.Duration) (time.Duration, bool) {
	var lost time.Duration
	after := end.Add(itl / 2)
	for _, s := range seqs {
		if s.restartedWithin(start, after) {
			return 0, false
		}
		ts := s.snapshot()
		a := -1
		for i, t := range ts {
			if !t.After(start) {
				a = i
			}
		}
		z := slices.IndexFunc(ts, func(t time.Time) bool { return t.After(after) })
		if a < 0 || z < 0 {
			return 0, false
		}
		lost += ts[z].Sub(ts[a]) - time.Duration(z-a)*itl
	}
	return lost, true
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkShortPrefillThreshold reports, per effective prompt length and number of
// sequences already decoding, in milliseconds: the median TTFT of a local and of a
// remote prefill, the median time the running sequences lost to each (summed over
// them), the running sequences' ITL, and the cost of each path as the cost policy
// counts it with itl_weight 1 (TTFT + time lost by the running sequences). Medians,
// because the machine these run on is shared and a stolen core hits one sample. Each op
// is one local and one remote request, in alternating order, each after a quiet
// period that measures the ITL undisturbed.
func BenchmarkShortPrefillThreshold(b *testing.B) {
	rig := startThresholdRig(b)
	defer rig.close()
	for _, running := range thresholdRunning {
		b.Run(fmt.Sprintf("running=%d", running), func(b *testing.B) {
			var bg *background
			if running > 0 {
				bg = startBackground(b, rig.background, running)
				defer bg.stop()
			}
			for _, n := range thresholdTokens {
				b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
					thresholdCase(b, rig, bg, n)
				})
			}
		})
	}
}

func thresholdCase(b *testing.B, rig *thresholdRig, bg *background, n int) {
	const quiet = 200 * time.Millisecond
	type path struct {
		name   string
		client decodev1connect.DecodeServiceClient
		want   decodev1.PrefillPath
		ttft   []float64 // ms
		lost   []float64 // ms, summed over the running sequences
	}
	paths := []*path{
		{name: "local", client: rig.local, want: decodev1.PrefillPath_PREFILL_PATH_LOCAL},
		{name: "remote", client: rig.remote, want: decodev1.PrefillPath_PREFILL_PATH_REMOTE},
	}
	var itls []float64
	measure := func(p *path) {
		for range 5 {
			time.Sleep(quiet)
			start := time.Now()
			end := ttft(b, p.client, freshPrompt(n), p.want)
			if bg == nil {
				p.ttft = append(p.ttft, float64(end.Sub(start).Microseconds())/1e3)
				return
			}
			itl, ok := baseITL(bg.seqs, start, quiet)
			if !ok {
				continue // a running sequence restarted: measure again
			}
			// Let the step after the prefill reach every running sequence's client.
			time.Sleep(50*time.Millisecond + 2*itl)
			lost, ok := stall(bg.seqs, start, end, itl)
			if !ok {
				continue
			}
			p.ttft = append(p.ttft, float64(end.Sub(start).Microseconds())/1e3)
			p.lost = append(p.lost, float64(lost.Microseconds())/1e3)
			itls = append(itls, float64(itl.Microseconds())/1e3)
			return
		}
		b.Fatal("no clean measurement in 5 tries")
	}
	// Warm both paths (first-request costs: connections, buffers).
	for _, p := range paths {
		ttft(b, p.client, freshPrompt(n), p.want)
	}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			measure(paths[0])
			measure(paths[1])
		} else {
			measure(paths[1])
			measure(paths[0])
		}
	}
	b.StopTimer()
	for _, p := range paths {
		t, l := median(p.ttft), median(p.lost)
		b.ReportMetric(t, "ttft-"+p.name+"-ms")
		if bg != nil {
			b.ReportMetric(l, "lost-"+p.name+"-ms")
		}
		b.ReportMetric(t+l, "cost-"+p.name+"-ms")
	}
	if bg != nil {
		b.ReportMetric(median(itls), "itl-ms")
	}
	b.ReportMetric(0, "ns/op")
}
