package decode_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// textEngine is a sim engine whose streams know each token's text, as an engine
// server's streams do in text mode.
type textEngine struct{ *sim.Engine }

func (e textEngine) Generate(ctx context.Context, req engine.Request) (engine.Stream, error) {
	s, err := e.Engine.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return &textStream{Stream: s}, nil
}

type textStream struct {
	engine.Stream
	last uint32
}

func (s *textStream) Next(ctx context.Context) (uint32, error) {
	tok, err := s.Stream.Next(ctx)
	s.last = tok
	return tok, err
}

func (s *textStream) Text() (string, bool) { return fmt.Sprintf(" w%d", s.last), true }

// A stream that knows its engine's text sends it beside each token id
// (token_texts, one per id); one that does not sends none, as before.
func TestEngineTextTravelsWithTokens(t *testing.T) {
	for _, withText := range []bool{true, false} {
		cfg := sim.DefaultConfig()
		cfg.TimeScale = 0
		s, err := sim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		var eng engine.Engine = s
		if withText {
			eng = textEngine{s}
		}
		svc, err := decode.New(decode.Config{WorkerID: "decode-text", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE,
			Params: decode.Params{Policy: decode.PolicyAlwaysLocal}, MinRemoteDeadline: time.Second, MaxRemoteDeadline: 5 * time.Second,
		}, eng, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(decodev1connect.NewDecodeServiceHandler(svc))
		for _, c := range rpctest.ServeStream[decodev1.GenerateRequest, decodev1.GenerateResponse](t, mux,
			decodev1connect.DecodeServiceGenerateProcedure) {
			t.Run(fmt.Sprintf("%s/text=%v", c.Name, withText), func(t *testing.T) {
				msgs, err := c.Do(rpctest.Context(t), &decodev1.GenerateRequest{RequestId: "r", PromptTokenIds: locPrompt(20, 3), MaxTokens: 5,
					Sampling: &workerv1.SamplingParams{Temperature: 0}})
				if err != nil {
					t.Fatal(err)
				}
				toks, final := locSplit(t, msgs)
				if len(toks) != 5 || len(final.GetTokenTexts()) != 0 {
					t.Fatalf("%d tokens, final message texts %q", len(toks), final.GetTokenTexts())
				}
				for i, m := range msgs[:len(msgs)-1] {
					want := []string(nil)
					if withText {
						want = []string{fmt.Sprintf(" w%d", m.GetTokenIds()[0])}
					}
					if got := m.GetTokenTexts(); len(got) != len(want) || len(got) == 1 && got[0] != want[0] {
						t.Errorf("message %d: token texts %q, want %q", i, got, want)
					}
				}
			})
		}
	}
}
