package frontend

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// fakeBackend plays a router plus decode worker: it streams a fixed output, a few
// tokens per message, honouring max_tokens the way the decode service does.
type fakeBackend struct {
	output    []uint32
	perMsg    int
	path      decodev1.PrefillPath
	cached    uint32
	err       error // from Generate
	recvErr   error // from Recv, after failAfter messages
	failAfter int
	// reportCompletion, if set, is what the final Usage claims was generated.
	reportCompletion uint32
	// texts, if set, are the engine's text for each output token (token_texts).
	texts []string
	// bySeed, if set, is the output and a shift of every token's logprob for a
	// request's seed (candidates that differ, for best_of).
	bySeed func(seed uint64) ([]uint32, float32)
	// noLogprobs: the backend sends no logprobs, as the sim engine.
	noLogprobs bool

	mu     sync.Mutex
	reqs   []*decodev1.GenerateRequest
	closed int
}

func (b *fakeBackend) Generate(ctx context.Context, req *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	b.mu.Unlock()
	if b.err != nil {
		return nil, nil, b.err
	}
	out := b.output
	var shift float32
	if b.bySeed != nil {
		out, shift = b.bySeed(req.GetSampling().GetSeed())
	}
	finish := decodev1.FinishReason_FINISH_REASON_STOP
	if len(out) > int(req.GetMaxTokens()) {
		out, finish = out[:req.GetMaxTokens()], decodev1.FinishReason_FINISH_REASON_LENGTH
	}
	per := max(b.perMsg, 1)
	var msgs []*decodev1.GenerateResponse
	for i := 0; i < len(out) || i == 0; i += per {
		m := &decodev1.GenerateResponse{TokenIds: out[min(i, len(out)):min(i+per, len(out))]}
		if b.texts != nil {
			m.TokenTexts = b.texts[min(i, len(b.texts)):min(i+per, len(out), len(b.texts))]
		}
		if req.GetSampling().GetLogprobs() && !b.noLogprobs {
			// Token k's logprob is -k/10 (plus shift); its alternatives are itself and the next id.
			for k := i; k < min(i+per, len(out)); k++ {
				lp := &workerv1.TokenLogprobs{Logprob: -float32(k)/10 + shift}
				for a := range min(int(req.GetSampling().GetTopLogprobs()), 2) {
					lp.Top = append(lp.Top, &workerv1.Logprob{TokenId: out[k] + uint32(a), Logprob: -float32(k)/10 - float32(a)})
				}
				m.Logprobs = append(m.Logprobs, lp)
			}
		}
		msgs = append(msgs, m)
	}
	if req.GetPromptLogprobs() {
		// Prompt token k's logprob is -k/100; its alternatives are itself and the next id.
		ids := req.GetPromptTokenIds()
		for k := 1; k < len(ids); k++ {
			lp := &workerv1.TokenLogprobs{Logprob: -float32(k) / 100}
			for a := range min(int(req.GetSampling().GetTopLogprobs()), 2) {
				lp.Top = append(lp.Top, &workerv1.Logprob{TokenId: ids[k] + uint32(a), Logprob: -float32(k)/100 - float32(a)})
			}
			msgs[0].PromptLogprobs = append(msgs[0].PromptLogprobs, lp)
		}
	}
	msgs[0].WorkerId = "decode-1"
	msgs[0].Prefill = &decodev1.PrefillDecision{
		Path: b.path, Reason: "above_threshold", Detail: "effective 40 tokens > threshold 16",
		PrefillWorkerId: "prefill-7", CachedTokens: b.cached, PromptTokens: uint32(len(req.GetPromptTokenIds())),
		Policy: "threshold", EffectiveTokens: uint32(len(req.GetPromptTokenIds())) - b.cached,
	}
	completion := uint32(len(out))
	if b.reportCompletion != 0 {
		completion = b.reportCompletion
	}
	last := msgs[len(msgs)-1]
	last.FinishReason = finish
	last.Usage = &decodev1.Usage{PromptTokens: uint32(len(req.GetPromptTokenIds())), CompletionTokens: completion, CachedTokens: b.cached}
	route := &routerv1.RouteResponse{DecodeWorker: &routerv1.Worker{Id: "decode-1"}, Reason: "least cost 3.0 of 2 candidates",
		DecodeCachedBlocks: b.cached / 16}
	return &fakeStream{b: b, ctx: ctx, msgs: msgs}, route, nil
}

func (b *fakeBackend) lastReq() *decodev1.GenerateRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.reqs) == 0 {
		return nil
	}
	return b.reqs[len(b.reqs)-1]
}

func (b *fakeBackend) closedStreams() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

type fakeStream struct {
	b    *fakeBackend
	ctx  context.Context
	msgs []*decodev1.GenerateResponse
	sent int
}

func (s *fakeStream) Recv() (*decodev1.GenerateResponse, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	if s.b.recvErr != nil && s.sent >= s.b.failAfter {
		return nil, s.b.recvErr
	}
	if s.sent >= len(s.msgs) {
		return nil, io.EOF
	}
	s.sent++
	return s.msgs[s.sent-1], nil
}

func (s *fakeStream) Close() error {
	s.b.mu.Lock()
	s.b.closed++
	s.b.mu.Unlock()
	return nil
}

func testTokenizer(t testing.TB) tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.CL100K()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testContextLength is the test model's context.
const testContextLength = 512

// testModel serves tok as "tandem-test" with ChatML, as the random-weight models are.
func testModel(tok tokenizer.Tokenizer) *Model {
	return &Model{ID: "tandem-test", Fingerprint: "test", ContextLength: testContextLength, Tokenizer: tok, Template: ChatML{}}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	cfg.DefaultMaxTokens = 64
	return cfg
}

// newTestFrontend returns a Frontend on b with a private metrics registry.
func newTestFrontend(t testing.TB, cfg Config, b Backend) (*Frontend, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	f, err := New(cfg, testModel(testTokenizer(t)), b, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	return f, reg
}

// newHTTPServer serves f's OpenAI API and Connect service on one port, as
// services/ does.
func newHTTPServer(t testing.TB, f *Frontend) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", f.HTTPHandler())
	mux.Handle(f.ConnectHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
