package decode_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// These tests call a decode worker that prefills locally (policy always-local, no
// prefill workers) over a sim engine, with a Connect client and a gRPC client.

const locWorkerID = "decode-local-1"

// locClient runs Generate to the end and returns every message and the error the
// stream ended with (nil for a clean end).
type locClient = rpctest.Call[decodev1.GenerateRequest, decodev1.GenerateResponse]

func locStart(t *testing.T) ([]locClient, *sim.Engine) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	svc, err := decode.New(decode.Config{
		WorkerID: locWorkerID, Mode: workerv1.WorkerMode_WORKER_MODE_DECODE,
		Params:            decode.Params{Policy: decode.PolicyAlwaysLocal},
		MinRemoteDeadline: time.Second, MaxRemoteDeadline: 5 * time.Second,
	}, eng, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(decodev1connect.NewDecodeServiceHandler(svc))
	return rpctest.ServeStream[decodev1.GenerateRequest, decodev1.GenerateResponse](t, mux, decodev1connect.DecodeServiceGenerateProcedure), eng
}

func locPrompt(n int, base uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = base + uint32(i)*7
	}
	return p
}

// locSplit checks the stream's shape (one token a message, then one final message
// with no tokens, the finish reason and usage) and returns the tokens and the final
// message.
func locSplit(t *testing.T, msgs []*decodev1.GenerateResponse) ([]uint32, *decodev1.GenerateResponse) {
	t.Helper()
	if len(msgs) == 0 {
		t.Fatal("no messages")
	}
	final := msgs[len(msgs)-1]
	if len(final.GetTokenIds()) != 0 {
		t.Fatalf("final message carries tokens %v", final.GetTokenIds())
	}
	if final.GetFinishReason() == decodev1.FinishReason_FINISH_REASON_UNSPECIFIED || final.GetUsage() == nil {
		t.Fatalf("final message lacks a finish reason or usage: %v", final)
	}
	var toks []uint32
	for i, m := range msgs[:len(msgs)-1] {
		if m.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_UNSPECIFIED || m.GetUsage() != nil {
			t.Fatalf("message %d of %d carries a finish reason or usage before the end", i, len(msgs))
		}
		if len(m.GetTokenIds()) == 0 {
			t.Fatalf("message %d carries no token", i)
		}
		toks = append(toks, m.GetTokenIds()...)
	}
	return toks, final
}

func TestLocalGenerateLengthUsageAndDecision(t *testing.T) {
	clients, _ := locStart(t)
	for i, c := range clients {
		t.Run(c.Name, func(t *testing.T) {
			p := locPrompt(40, 11+uint32(i)) // a prompt of its own, so nothing is cached
			const maxTokens = 12
			msgs, err := c.Do(rpctest.Context(t), &decodev1.GenerateRequest{
				RequestId: "r1", PromptTokenIds: p, MaxTokens: maxTokens, Sampling: &workerv1.SamplingParams{Temperature: 0},
			})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			toks, final := locSplit(t, msgs)
			if len(toks) != maxTokens {
				t.Fatalf("got %d tokens, want max_tokens=%d", len(toks), maxTokens)
			}
			if got := final.GetFinishReason(); got != decodev1.FinishReason_FINISH_REASON_LENGTH {
				t.Errorf("finish reason %v, want LENGTH", got)
			}
			if u := final.GetUsage(); u.GetPromptTokens() != uint32(len(p)) || u.GetCompletionTokens() != uint32(len(toks)) {
				t.Errorf("usage prompt=%d completion=%d, want %d and %d", u.GetPromptTokens(), u.GetCompletionTokens(), len(p), len(toks))
			}
			first := msgs[0]
			d := first.GetPrefill()
			if d == nil {
				t.Fatal("first message carries no prefill decision")
			}
			if d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_LOCAL || d.GetPolicy() != string(decode.PolicyAlwaysLocal) || d.GetReason() == "" {
				t.Errorf("decision path %v policy %q reason %q, want LOCAL always-local with a reason", d.GetPath(), d.GetPolicy(), d.GetReason())
			}
			if d.GetPromptTokens() != uint32(len(p)) || d.GetCachedTokens() != 0 || d.GetEffectiveTokens() != uint32(len(p)) {
				t.Errorf("decision prompt=%d cached=%d effective=%d for a new %d-token prompt",
					d.GetPromptTokens(), d.GetCachedTokens(), d.GetEffectiveTokens(), len(p))
			}
			if first.GetWorkerId() != locWorkerID || first.GetWorkerMode() != workerv1.WorkerMode_WORKER_MODE_DECODE {
				t.Errorf("first message worker %q mode %v, want %q DECODE", first.GetWorkerId(), first.GetWorkerMode(), locWorkerID)
			}
			for j, m := range msgs[1:] {
				if m.GetPrefill() != nil {
					t.Errorf("message %d repeats the prefill decision", j+1)
				}
			}
		})
	}
}

func TestLocalGenerateDeterministic(t *testing.T) {
	clients, _ := locStart(t)
	p := locPrompt(33, 5)
	var all [][]uint32
	for _, c := range clients {
		for range 2 {
			msgs, err := c.Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: p, MaxTokens: 20, Sampling: &workerv1.SamplingParams{Temperature: 0}})
			if err != nil {
				t.Fatalf("%s: Generate: %v", c.Name, err)
			}
			toks, _ := locSplit(t, msgs)
			all = append(all, toks)
		}
	}
	for i := 1; i < len(all); i++ {
		if !slices.Equal(all[0], all[i]) {
			t.Fatalf("run %d gave %v, run 0 gave %v: greedy decoding (with a cached prefix or not) must repeat", i, all[i], all[0])
		}
	}
	// A different prompt must not give the same tokens, or the check above proves nothing.
	msgs, err := clients[0].Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: locPrompt(33, 6), MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if other, _ := locSplit(t, msgs); slices.Equal(other, all[0]) {
		t.Fatal("two different prompts gave identical tokens")
	}
	// Seeded sampling repeats across clients and differs between seeds.
	run := func(c locClient, seed uint64) []uint32 {
		msgs, err := c.Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: p, MaxTokens: 10,
			Sampling: &workerv1.SamplingParams{Temperature: 0.8, Seed: seed}})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		toks, _ := locSplit(t, msgs)
		return toks
	}
	a, b := run(clients[0], 42), run(clients[1], 42)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 42 gave %v over Connect and %v over gRPC", a, b)
	}
	if c := run(clients[0], 43); slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 gave the same tokens %v", a)
	}
}

func TestLocalGenerateInvalidArgument(t *testing.T) {
	clients, _ := locStart(t)
	vocab := uint32(sim.DefaultConfig().VocabSize + 1) // the sim's vocabulary includes its EOS token
	ctxLen := sim.DefaultConfig().ContextLength
	cases := []struct {
		name  string
		req   *decodev1.GenerateRequest
		field string
	}{
		{"empty prompt", &decodev1.GenerateRequest{MaxTokens: 4}, "prompt_token_ids"},
		{"token outside vocabulary", &decodev1.GenerateRequest{PromptTokenIds: []uint32{1, 2, vocab}, MaxTokens: 4}, "prompt_token_ids[2]"},
		{"prompt fills the context", &decodev1.GenerateRequest{PromptTokenIds: locPrompt(ctxLen, 1), MaxTokens: 4}, "prompt_token_ids"},
		{"negative temperature", &decodev1.GenerateRequest{PromptTokenIds: []uint32{1}, Sampling: &workerv1.SamplingParams{Temperature: -1}}, "temperature"},
		{"top_p above one", &decodev1.GenerateRequest{PromptTokenIds: []uint32{1}, Sampling: &workerv1.SamplingParams{TopP: 1.5}}, "top_p"},
	}
	for _, c := range clients {
		for _, tc := range cases {
			t.Run(c.Name+"/"+tc.name, func(t *testing.T) {
				msgs, err := c.Do(rpctest.Context(t), tc.req)
				if err == nil {
					t.Fatalf("Generate succeeded with %d messages, want InvalidArgument", len(msgs))
				}
				if got := rpctest.Code(err); got != connect.CodeInvalidArgument {
					t.Fatalf("code %v (%v), want invalid_argument", got, err)
				}
				if !strings.Contains(err.Error(), tc.field) {
					t.Errorf("error %q does not name the field %q", err, tc.field)
				}
				if len(msgs) != 0 {
					t.Errorf("got %d messages before the error", len(msgs))
				}
			})
		}
	}
	// The last token of the vocabulary, and a prompt one short of the context, are fine.
	msgs, err := clients[0].Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: []uint32{vocab - 1}, MaxTokens: 1})
	if err != nil {
		t.Fatalf("token %d (the last in the vocabulary) rejected: %v", vocab-1, err)
	}
	if toks, _ := locSplit(t, msgs); len(toks) != 1 {
		t.Fatalf("got %d tokens, want 1", len(toks))
	}
	msgs, err = clients[1].Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: locPrompt(ctxLen-1, 0), MaxTokens: 5})
	if err != nil {
		t.Fatalf("a prompt one token short of the context rejected: %v", err)
	}
	if toks, final := locSplit(t, msgs); len(toks) != 1 || final.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("got %d tokens finishing %v, want 1 token (the context's end) and LENGTH", len(toks), final.GetFinishReason())
	}
}

func TestLocalGenerateStopToken(t *testing.T) {
	clients, _ := locStart(t)
	for i, c := range clients {
		t.Run(c.Name, func(t *testing.T) {
			p := locPrompt(24, 3+uint32(i))
			msgs, err := c.Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: p, MaxTokens: 16})
			if err != nil {
				t.Fatal(err)
			}
			free, _ := locSplit(t, msgs)
			// Stop at the first position (from the third on) whose token is new.
			at := -1
			for k := 3; k < len(free); k++ {
				if !slices.Contains(free[:k], free[k]) {
					at = k
					break
				}
			}
			if at < 0 {
				t.Fatalf("no usable stop token in %v", free)
			}
			stop := free[at]
			msgs, err = c.Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: p, MaxTokens: 16, StopTokenIds: []uint32{stop}})
			if err != nil {
				t.Fatal(err)
			}
			toks, final := locSplit(t, msgs)
			if !slices.Equal(toks, free[:at]) {
				t.Fatalf("with stop token %d got %v, want %v (the tokens before it, without it)", stop, toks, free[:at])
			}
			if final.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_STOP {
				t.Errorf("finish reason %v, want STOP", final.GetFinishReason())
			}
			if u := final.GetUsage(); u.GetCompletionTokens() != uint32(at) || u.GetPromptTokens() != uint32(len(p)) {
				t.Errorf("usage prompt=%d completion=%d, want %d and %d", u.GetPromptTokens(), u.GetCompletionTokens(), len(p), at)
			}
			// Stopping on the very first token: one message, which must still carry the decision.
			msgs, err = c.Do(rpctest.Context(t), &decodev1.GenerateRequest{PromptTokenIds: p, MaxTokens: 16, StopTokenIds: []uint32{free[0]}})
			if err != nil {
				t.Fatal(err)
			}
			toks, final = locSplit(t, msgs)
			if len(toks) != 0 || final.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_STOP {
				t.Fatalf("stop on the first token: got %v finishing %v", toks, final.GetFinishReason())
			}
			if final.GetPrefill().GetPath() != decodev1.PrefillPath_PREFILL_PATH_LOCAL || final.GetWorkerId() != locWorkerID {
				t.Errorf("the only message lacks the prefill decision or worker id: %v", final)
			}
		})
	}
}

func TestLocalGenerateCancelFreesBlocks(t *testing.T) {
	clients, eng := locStart(t)
	for i, c := range clients {
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(rpctest.Context(t))
			// Cancel as soon as the first token is in: the request asked for thousands.
			cctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				defer cancel()
				for eng.Stats().Running == 0 && cctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
			}()
			msgs, err := c.Do(ctx, &decodev1.GenerateRequest{PromptTokenIds: locPrompt(30, 100+uint32(i)), MaxTokens: 5000})
			if err == nil {
				t.Fatalf("cancelled Generate ended cleanly after %d messages", len(msgs))
			}
			if got := rpctest.Code(err); got != connect.CodeCanceled {
				t.Errorf("code %v (%v), want canceled", got, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				st := eng.Stats()
				if st.ActiveBlocks == 0 && st.Running == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("blocks still held after the client cancelled: %+v", st)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
