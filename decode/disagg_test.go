package decode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

var (
	alwaysLocal  = decode.Params{Policy: decode.PolicyAlwaysLocal}
	alwaysRemote = decode.Params{Policy: decode.PolicyAlwaysRemote}
)

func prompt(seed, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32((seed*7919 + i*104729) % 100000)
	}
	return p
}

func request(id string, p []uint32, temp float32, seed uint64, prefill ...string) *decodev1.GenerateRequest {
	r := &decodev1.GenerateRequest{
		RequestId: id, PromptTokenIds: p, MaxTokens: 12,
		Sampling: &workerv1.SamplingParams{Temperature: temp, TopP: 0.9, Seed: seed, Logprobs: true, TopLogprobs: 3},
	}
	for _, id := range prefill {
		r.PrefillWorkers = append(r.PrefillWorkers, &decodev1.PrefillCandidate{WorkerId: id})
	}
	return r
}

// pathModels are the models the path equivalence runs on: the random cl100k shape,
// the embedded stories260K (a llama GGUF), and a qwen2 GGUF with quantized weights
// (biases, NeoX rope, tied embeddings, integer kernels).
func pathModels(t *testing.T) []string {
	_, qwen := testmodel.Random(testmodel.Shape{Arch: "qwen2", D: 256, Layers: 2, Heads: 8, KVHeads: 2, FFN: 512, Vocab: 288,
		Tied: true, Theta: 1e6}, 5).As(t, gguf.TypeQ8_0)
	path := filepath.Join(t.TempDir(), "qwen2-q8_0.gguf")
	if err := os.WriteFile(path, qwen, 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"tiny", "stories260K", path}
}

// Whichever path a request takes, local, remote, or remote with part of the prompt
// already cached on the decode worker, the user gets exactly the same tokens, and
// the same logprobs, on every architecture.
func TestPathsGiveIdenticalTokens(t *testing.T) {
	for _, model := range pathModels(t) {
		t.Run(filepath.Base(model), func(t *testing.T) { pathsGiveIdenticalTokens(t, model) })
	}
}

func pathsGiveIdenticalTokens(t *testing.T, model string) {
	ctx := context.Background()
	local := startDecode(t, newNativeModel(t, model), nil, alwaysLocal, time.Second, 30*time.Second)
	pf := &staticPrefillers{}
	pnode := startPrefill(t, newNativeModel(t, model), "p0")
	pf.add("p0", pnode.client)
	remote := startDecode(t, newNativeModel(t, model), pf, alwaysRemote, 30*time.Second, time.Minute)
	vocab := local.eng.Info().VocabSize
	prompt := func(seed, n int) []uint32 {
		p := prompt(seed, n)
		for i := range p {
			p[i] %= uint32(vocab)
		}
		return p
	}

	for i, n := range []int{3, 17, 40, 100, 257} {
		for _, s := range []struct {
			temp float32
			seed uint64
		}{{0, 0}, {0.8, 11}, {1.2, 12345}} {
			name := fmt.Sprintf("len%d/temp%.1f", n, s.temp)
			p := prompt(i+1, n)
			want, err := generate(t, ctx, local.client, request(name+"-local", p, s.temp, s.seed))
			if err != nil {
				t.Fatalf("%s local: %v", name, err)
			}
			got, err := generate(t, ctx, remote.client, request(name+"-remote", p, s.temp, s.seed, "p0"))
			if err != nil {
				t.Fatalf("%s remote: %v", name, err)
			}
			if got.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE && got.decision.GetCachedTokens() == 0 {
				t.Fatalf("%s: path %v (%s), want remote", name, got.decision.GetPath(), got.decision.GetDetail())
			}
			if !slices.Equal(got.tokens, want.tokens) || len(want.tokens) == 0 {
				t.Errorf("%s: remote tokens %v, local tokens %v", name, got.tokens, want.tokens)
			}
			if len(got.logprobs) != len(got.tokens) || !slices.EqualFunc(got.logprobs, want.logprobs, func(a, b *workerv1.TokenLogprobs) bool {
				return proto.Equal(a, b)
			}) {
				t.Errorf("%s: remote logprobs %v, local %v", name, got.logprobs, want.logprobs)
			}
			if got.usage.GetPromptTokens() != uint32(n) || got.usage.GetCompletionTokens() != uint32(len(got.tokens)) {
				t.Errorf("%s: usage %v for %d prompt and %d output tokens", name, got.usage, n, len(got.tokens))
			}
		}
	}

	// A prompt extending one the decode worker has imported before: only the blocks
	// it lacks cross the wire, and the tokens are still the local path's.
	base := prompt(99, 80)
	if _, err := generate(t, ctx, remote.client, request("warm", base, 0, 0, "p0")); err != nil {
		t.Fatal(err)
	}
	longer := append(slices.Clone(base), prompt(100, 50)...)
	want, err := generate(t, ctx, local.client, request("longer-local", longer, 0.7, 5))
	if err != nil {
		t.Fatal(err)
	}
	got, err := generate(t, ctx, remote.client, request("longer-remote", longer, 0.7, 5, "p0"))
	if err != nil {
		t.Fatal(err)
	}
	d := got.decision
	if d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || d.GetCachedTokens() != 80 {
		t.Fatalf("path %v with %d cached tokens, want remote with the 80-token prefix (5 blocks) cached", d.GetPath(), d.GetCachedTokens())
	}
	blockBytes := uint64(remote.eng.Info().Layout.BlockBytes)
	if wantBytes := uint64(9-5) * blockBytes; d.GetHandoffBytes() != wantBytes {
		t.Errorf("handoff moved %d bytes, want %d (4 of 9 blocks)", d.GetHandoffBytes(), wantBytes)
	}
	if !slices.Equal(got.tokens, want.tokens) {
		t.Errorf("partially cached remote tokens %v, local %v", got.tokens, want.tokens)
	}
	waitIdle(t, "decode", remote.eng)
	waitIdle(t, "prefill", pnode.eng)
}

// The first rung: a prefill worker that is down before any KV arrives is replaced by
// another, and with none left the decode worker prefills locally.
func TestFallbackWhenPrefillWorkerIsDown(t *testing.T) {
	ctx := context.Background()
	dead := startPrefill(t, newNative(t), "dead")
	dead.srv.Close()
	alive := startPrefill(t, newNative(t), "alive")

	pf := &staticPrefillers{}
	pf.add("dead", dead.client)
	node := startDecode(t, newNative(t), pf, alwaysRemote, time.Second, 10*time.Second)
	p := prompt(5, 70)
	r, err := generate(t, ctx, node.client, request("r1", p, 0, 0, "dead"))
	if err != nil {
		t.Fatalf("request failed instead of falling back: %v", err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK || r.decision.GetReason() != "remote_error_before_kv" {
		t.Errorf("path %v reason %q, want fallback remote_error_before_kv", r.decision.GetPath(), r.decision.GetReason())
	}
	if len(r.tokens) != 12 {
		t.Errorf("got %d tokens, want 12", len(r.tokens))
	}

	pf.add("alive", alive.client)
	r, err = generate(t, ctx, node.client, request("r2", prompt(6, 70), 0, 0, "dead", "alive"))
	if err != nil {
		t.Fatal(err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || r.decision.GetPrefillWorkerId() != "alive" ||
		!slices.Equal(r.decision.GetFailedPrefillWorkerIds(), []string{"dead"}) {
		t.Errorf("decision %v, want remote on alive after dead failed", r.decision)
	}
	// The decision is counted under its own reason; the failure is in the detail.
	if r.decision.GetReason() != "always_remote" || !strings.Contains(r.decision.GetDetail(), `["dead"] failed before any KV`) {
		t.Errorf("reason %q, detail %q: want always_remote, naming dead's failure", r.decision.GetReason(), r.decision.GetDetail())
	}

	// An unknown candidate and a failing one leave the router's list empty:
	// discovery is asked for another, and alive prefills.
	r, err = generate(t, ctx, node.client, request("r3", prompt(7, 70), 0, 0, "stale-1", "dead"))
	if err != nil {
		t.Fatal(err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || r.decision.GetPrefillWorkerId() != "alive" ||
		!slices.Equal(r.decision.GetFailedPrefillWorkerIds(), []string{"stale-1", "dead"}) {
		t.Errorf("decision %v, want remote on alive (from discovery) after stale-1 and dead", r.decision)
	}
	waitIdle(t, "decode", node.eng)
}

// A stream cut mid-transfer falls back to local prefill, with the same tokens, and
// frees the half-imported blocks.
func TestFallbackWhenStreamIsCutMidTransfer(t *testing.T) {
	ctx := context.Background()
	pnode := startPrefill(t, newNative(t), "p0")
	proxy := cutProxy(t, pnode.srv.Listener.Addr().String(), 100<<10)
	pf := &staticPrefillers{}
	pf.add("p0", grpcPrefillClient(t, proxy))
	node := startDecode(t, newNative(t), pf, alwaysRemote, time.Second, 10*time.Second)
	local := startDecode(t, newNative(t), nil, alwaysLocal, time.Second, 10*time.Second)

	p := prompt(8, 300) // 19 blocks of 16 KiB: far more than the proxy lets through
	want, err := generate(t, ctx, local.client, request("l", p, 0.5, 3))
	if err != nil {
		t.Fatal(err)
	}
	got, err := generate(t, ctx, node.client, request("r", p, 0.5, 3, "p0"))
	if err != nil {
		t.Fatalf("request failed instead of falling back: %v", err)
	}
	if got.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK || got.decision.GetReason() != "remote_error_mid_transfer" {
		t.Errorf("path %v reason %q (%s), want fallback remote_error_mid_transfer", got.decision.GetPath(), got.decision.GetReason(), got.decision.GetDetail())
	}
	if !slices.Equal(got.tokens, want.tokens) {
		t.Errorf("fallback tokens %v, local %v", got.tokens, want.tokens)
	}
	waitIdle(t, "decode", node.eng)
	waitIdle(t, "prefill", pnode.eng)
}

// corrupting flips one byte in the second chunk a prefill worker sends.
type corrupting struct{ handoff.Client }

type corruptStream struct {
	handoff.Stream
	chunks int
}

func (c corrupting) Prefill(ctx context.Context, in *prefillv1.PrefillRequest) (handoff.Stream, error) {
	s, err := c.Client.Prefill(ctx, in)
	return &corruptStream{Stream: s}, err
}

func (s *corruptStream) Recv() (*prefillv1.PrefillResponse, error) {
	m, err := s.Stream.Recv()
	if c := m.GetChunk(); c != nil {
		if s.chunks++; s.chunks == 2 {
			c.Data[len(c.Data)/2] ^= 0x40
		}
	}
	return m, err
}

func TestFallbackOnCorruptChunk(t *testing.T) {
	ctx := context.Background()
	pnode := startPrefill(t, newNative(t), "p0")
	pf := &staticPrefillers{}
	pf.add("p0", corrupting{pnode.client})
	node := startDecode(t, newNative(t), pf, alwaysRemote, time.Second, 10*time.Second)
	r, err := generate(t, ctx, node.client, request("r", prompt(9, 200), 0, 0, "p0"))
	if err != nil {
		t.Fatalf("request failed instead of falling back: %v", err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK || r.decision.GetReason() != "crc_mismatch" {
		t.Errorf("path %v reason %q, want fallback crc_mismatch", r.decision.GetPath(), r.decision.GetReason())
	}
	waitIdle(t, "decode", node.eng)
	waitIdle(t, "prefill", pnode.eng)
}

// slowPrefill makes every prefill wait before computing, as an overloaded worker does.
type slowPrefill struct {
	engine.Engine
	delay time.Duration
}

func (s slowPrefill) Prefill(ctx context.Context, req engine.Request) (engine.Export, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Engine.Prefill(ctx, req)
}

func TestFallbackWhenPrefillMissesItsDeadline(t *testing.T) {
	ctx := context.Background()
	peng := newNative(t)
	pnode := startPrefill(t, slowPrefill{peng, 3 * time.Second}, "slow")
	pf := &staticPrefillers{}
	pf.add("slow", pnode.client)
	node := startDecode(t, newNative(t), pf, alwaysRemote, 200*time.Millisecond, 300*time.Millisecond)
	r, err := generate(t, ctx, node.client, request("r", prompt(10, 64), 0, 0, "slow"))
	if err != nil {
		t.Fatalf("request failed instead of falling back: %v", err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK || r.decision.GetReason() != "remote_timeout" {
		t.Errorf("path %v reason %q, want fallback remote_timeout", r.decision.GetPath(), r.decision.GetReason())
	}
	waitIdle(t, "decode", node.eng)
	waitIdle(t, "prefill", peng)
}

func TestUnknownPrefillWorkerIsNeverCalled(t *testing.T) {
	pf := &staticPrefillers{}
	node := startDecode(t, newNative(t), pf, alwaysRemote, time.Second, 10*time.Second)
	r, err := generate(t, context.Background(), node.client, request("r", prompt(11, 40), 0, 0, "evil.example:443", "stale-1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK || r.decision.GetReason() != "unknown_prefill_worker" {
		t.Errorf("path %v reason %q, want fallback unknown_prefill_worker", r.decision.GetPath(), r.decision.GetReason())
	}
	if got := r.decision.GetFailedPrefillWorkerIds(); !slices.Equal(got, []string{"evil.example:443", "stale-1"}) {
		t.Errorf("failed prefill workers %q, want both unknown ids", got)
	}
	c := counters(t, node.reg)
	if v := c["tandem_decode_remote_prefill_failures_total"][`{reason="unknown_prefill_worker"}`]; v != 2 {
		t.Errorf("remote prefill failures (unknown_prefill_worker) %v, want 2", v)
	}
	if v := c["tandem_decode_fallbacks_total"][`{reason="unknown_prefill_worker"}`]; v != 1 {
		t.Errorf("fallbacks (unknown_prefill_worker) %v, want 1", v)
	}
}

// An unknown candidate ahead of a known one is skipped, not a reason to give
// up on remote prefill: the known one prefills, and the unknown one is named
// and counted as a failed attempt, not as a fallback.
func TestUnknownPrefillWorkerIsSkipped(t *testing.T) {
	peng := newNative(t)
	pnode := startPrefill(t, peng, "p0")
	pf := &staticPrefillers{}
	pf.add("p0", pnode.client)
	node := startDecode(t, newNative(t), pf, alwaysRemote, time.Second, 10*time.Second)
	r, err := generate(t, context.Background(), node.client, request("r", prompt(14, 40), 0, 0, "stale-1", "p0"))
	if err != nil {
		t.Fatal(err)
	}
	d := r.decision
	if d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || d.GetPrefillWorkerId() != "p0" || d.GetReason() != "always_remote" {
		t.Errorf("path %v on %q reason %q (%s), want remote on p0 for always_remote", d.GetPath(), d.GetPrefillWorkerId(), d.GetReason(), d.GetDetail())
	}
	if got := d.GetFailedPrefillWorkerIds(); !slices.Equal(got, []string{"stale-1"}) {
		t.Errorf("failed prefill workers %q, want [stale-1]", got)
	}
	c := counters(t, node.reg)
	if v := c["tandem_decode_remote_prefill_failures_total"][`{reason="unknown_prefill_worker"}`]; v != 1 {
		t.Errorf("remote prefill failures (unknown_prefill_worker) %v, want 1", v)
	}
	if v := c["tandem_decode_fallbacks_total"]; len(v) != 0 {
		t.Errorf("fallbacks %v, want none", v)
	}
	if len(r.tokens) == 0 {
		t.Error("no tokens")
	}
	waitIdle(t, "decode", node.eng)
	waitIdle(t, "prefill", peng)
}

func TestEnforceDisaggTurnsFallbackIntoError(t *testing.T) {
	dead := startPrefill(t, newNative(t), "dead")
	dead.srv.Close()
	pf := &staticPrefillers{}
	pf.add("dead", dead.client)
	p := alwaysRemote
	p.EnforceDisagg = true
	node := startDecode(t, newNative(t), pf, p, time.Second, 10*time.Second)
	_, err := generate(t, context.Background(), node.client, request("r", prompt(12, 40), 0, 0, "dead"))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err %v, want Unavailable naming enforce-disagg", err)
	}
	waitIdle(t, "decode", node.eng)
}

// A client that goes away mid-handoff cancels the remote prefill; both sides free
// their blocks.
func TestCancelFreesBlocksOnBothSides(t *testing.T) {
	peng := newNative(t)
	pnode := startPrefill(t, slowPrefill{peng, 300 * time.Millisecond}, "p0")
	pf := &staticPrefillers{}
	pf.add("p0", pnode.client)
	node := startDecode(t, newNative(t), pf, alwaysRemote, 5*time.Second, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := generate(t, ctx, node.client, request("r", prompt(13, 120), 0, 0, "p0"))
	if err == nil || !(connect.CodeOf(err) == connect.CodeCanceled || connect.CodeOf(err) == connect.CodeDeadlineExceeded || errors.Is(err,
		context.DeadlineExceeded)) {
		t.Fatalf("err %v, want the client's deadline", err)
	}
	waitIdle(t, "decode", node.eng)
	waitIdle(t, "prefill", peng)

	// And a request cancelled while decoding, after the import.
	ctx2, cancel2 := context.WithCancel(context.Background())
	stream, err := node.client.Generate(ctx2, connect.NewRequest(request("r2", prompt(14, 120), 0, 0, "p0")))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no first token: %v", stream.Err())
	}
	cancel2()
	for stream.Receive() {
	}
	stream.Close()
	waitIdle(t, "decode", node.eng)
	waitIdle(t, "prefill", peng)
}

// fullPool is a decode engine whose imports find no free blocks, and which
// counts the local prefills it is asked for.
type fullPool struct {
	engine.Engine
	local *atomic.Int32
}

func (f fullPool) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	if spec.BlockWait <= 0 {
		return nil, fmt.Errorf("spec.BlockWait %v: the decode worker must let the import wait for blocks", spec.BlockWait)
	}
	return nil, fmt.Errorf("%w: import needs %d", engine.ErrNoBlocks, spec.NumBlocks)
}

func (f fullPool) Generate(ctx context.Context, req engine.Request) (engine.Stream, error) {
	f.local.Add(1)
	return f.Engine.Generate(ctx, req)
}

// When this worker's own pool cannot take the KV, neither another prefill worker
// nor a local prefill (which needs the same blocks on the same pool) helps: the
// request is refused ResourceExhausted, naming why, for the frontend to take to
// another decode worker, and counted as a kv_blocks rejection. The pre-check
// before the prefill (KVPrecheck) sees the pool's room, not the import's
// failure, and lets this one through to be refused after.
func TestImportWithoutBlocksIsRefusedNotPrefilledLocally(t *testing.T) {
	for _, precheck := range []bool{false, true} {
		t.Run(fmt.Sprint("precheck=", precheck), func(t *testing.T) { testImportWithoutBlocks(t, precheck) })
	}
}

func testImportWithoutBlocks(t *testing.T, precheck bool) {
	pf := &staticPrefillers{}
	pf.add("p1", startPrefill(t, newNative(t), "p1").client)
	pf.add("p2", startPrefill(t, newNative(t), "p2").client)
	eng := fullPool{newNative(t), new(atomic.Int32)}
	node := startDecodeWith(t, eng, pf, alwaysRemote, 5*time.Second, 10*time.Second, func(c *decode.Config) { c.KVPrecheck = precheck })
	_, err := generate(t, context.Background(), node.client, request("r", prompt(7, 70), 0, 0, "p1", "p2"))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "import_no_blocks") ||
		!strings.Contains(err.Error(), "on p1") {
		t.Fatalf("err %v, want ResourceExhausted for import_no_blocks after p1", err)
	}
	if n := eng.local.Load(); n != 0 {
		t.Errorf("%d local prefills on the full pool, want none", n)
	}
	if got := rejected(t, node.reg); got[decode.RejectKVBlocks] != 1 {
		t.Errorf("rejections by reason %v, want kv_blocks 1", got)
	}
	waitIdle(t, "decode", eng.Engine)
}

// A worker that lends prefill is in discovery as a prefill worker, so it finds
// itself among its own: whether the router names it or discovery lists it, it is
// never called for its own prompt (which, here, would fail and show among the
// failed prefill workers).
func TestSelfIsNeverItsOwnPrefillWorker(t *testing.T) {
	ctx := context.Background()
	self := startPrefill(t, newNative(t), "decode-test")
	self.srv.Close()
	alive := startPrefill(t, newNative(t), "alive")
	pf := &staticPrefillers{}
	pf.add("decode-test", self.client) // startDecode's worker id
	pf.add("alive", alive.client)
	node := startDecode(t, newNative(t), pf, alwaysRemote, time.Second, 10*time.Second)
	for i, suggested := range [][]string{{"decode-test", "alive"}, nil} {
		r, err := generate(t, ctx, node.client, request(fmt.Sprint("r", i), prompt(20+i, 70), 0, 0, suggested...))
		if err != nil {
			t.Fatal(err)
		}
		if d := r.decision; d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || d.GetPrefillWorkerId() != "alive" || len(d.GetFailedPrefillWorkerIds()) > 0 {
			t.Errorf("suggested %v: decision %v, want remote on alive, the worker itself never tried", suggested, d)
		}
	}
	waitIdle(t, "decode", node.eng)
}
