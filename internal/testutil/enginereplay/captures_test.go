package enginereplay_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/engine/sglang"
	"github.com/tandem-serve/tandem/engine/trtllm"
	"github.com/tandem-serve/tandem/engine/vllm"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/enginereplay"
	"github.com/tandem-serve/tandem/models"
	"github.com/tandem-serve/tandem/tokenizer"
)

// captureSpec is one entry of testdata/captures.json: a capture and what the
// worker that made it was given.
type captureSpec struct {
	File          string `json:"file"`
	Engine        string `json:"engine"`
	Tokenizer     string `json:"tokenizer"` // cl100k, stories260K, or a tokenizer.json under testdata
	ContextLength int    `json:"context_length"`
	// TokenMode, when set, is the mode the worker settled on.
	TokenMode string `json:"token_mode"`
}

func loadTokenizer(t *testing.T, name string) tokenizer.Tokenizer {
	t.Helper()
	var tok tokenizer.Tokenizer
	var err error
	switch name {
	case "cl100k":
		tok, err = tokenizer.CL100K()
	case models.Stories260KName:
		f, ferr := models.Open(name)
		if ferr != nil {
			t.Fatal(ferr)
		}
		tok, err = tokenizer.FromGGUF(f)
	default:
		var b []byte
		if b, err = os.ReadFile(filepath.Join("testdata", name)); err == nil {
			tok, err = tokenizer.FromHuggingFace(b)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func gpuDialect(name string) openaihttp.Dialect {
	switch name {
	case "trtllm":
		return trtllm.Dialect()
	case "sglang":
		return sglang.Dialect(sglang.Bootstrap{Host: "127.0.0.1", Port: 8998})
	}
	return vllm.Dialect()
}

// Every committed capture, replayed call by call through the engine adapter: the
// client gets what the engine answered then, token for token (or, in text mode,
// the same text), and every request the adapter makes was in the capture.
func TestCaptures(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "captures.json"))
	if err != nil {
		t.Fatal(err)
	}
	var specs []captureSpec
	if err := json.Unmarshal(b, &specs); err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		t.Run(sp.File, func(t *testing.T) {
			xs, err := enginereplay.Load(filepath.Join("testdata", sp.File))
			if err != nil {
				t.Fatal(err)
			}
			calls, err := enginereplay.Calls(xs)
			if err != nil {
				t.Fatal(err)
			}
			if len(calls) == 0 {
				t.Fatal("the capture holds no completion")
			}
			r := enginereplay.Start(t, xs)
			tok := loadTokenizer(t, sp.Tokenizer)
			e, err := openaihttp.New(t.Context(), openaihttp.Config{URL: r.URL(), Dialect: gpuDialect(sp.Engine), Tokenizer: tok,
				BlockSize: 16, ContextLength: sp.ContextLength, MetricsInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if sp.TokenMode != "" && string(e.TokenMode()) != sp.TokenMode {
				t.Errorf("token mode %s, the worker's was %s", e.TokenMode(), sp.TokenMode)
			}
			exports := map[string]engine.RefExport{}
			for _, c := range calls {
				var s engine.Stream
				switch c.Leg {
				case enginereplay.Prefill:
					prefill(t, e, c, exports)
					continue
				case enginereplay.Decode:
					params := c.Params
					if x, ok := exports[c.Req.ID]; ok {
						params = x.Params()
					}
					s, err = e.ImportRef(t.Context(), c.Req, params)
				default:
					s, err = e.Generate(t.Context(), c.Req)
				}
				if err != nil {
					t.Fatalf("%s %s: %v", c.Req.ID, c.Leg, err)
				}
				got, text := testutil.DrainText(t, t.Context(), s)
				said, err := enginereplay.Answer(c.Exchange)
				if err != nil {
					t.Fatal(err)
				}
				checkSaid(t, c, e.TokenMode(), got, text, said)
			}
			for id, x := range exports {
				if err := x.Wait(t.Context()); err != nil {
					t.Errorf("%s prefill leg: %v", id, err)
				}
			}
			if m := r.Misses(); len(m) > 0 {
				t.Errorf("requests the capture did not hold: %q", m)
			}
		})
	}
}

// prefill runs a prefill leg; one the engine answered without transfer
// parameters must fail so, as the worker then falls back.
func prefill(t *testing.T, e *openaihttp.Engine, c enginereplay.Call, exports map[string]engine.RefExport) {
	t.Helper()
	said, err := enginereplay.Answer(c.Exchange)
	if err != nil {
		t.Fatal(err)
	}
	x, err := e.ExportRef(t.Context(), c.Req)
	switch {
	case !said.Params && e.Info().Engine != "sglang":
		if !errors.Is(err, engine.ErrNoTransferParams) {
			t.Errorf("%s prefill leg without parameters: %v, want %v", c.Req.ID, err, engine.ErrNoTransferParams)
		}
	case err != nil:
		t.Fatalf("%s prefill leg: %v", c.Req.ID, err)
	default:
		t.Cleanup(x.Release)
		exports[c.Req.ID] = x
	}
}

// checkSaid compares what the client got with what the engine said: the same
// ids, but for a stop token at the end, which is not the client's; in text
// mode, the same text.
func checkSaid(t *testing.T, c enginereplay.Call, mode openaihttp.TokenMode, got []uint32, text string, said enginereplay.Said) {
	t.Helper()
	if mode == openaihttp.TextTokens {
		// The client is sent the engine's text, exactly, chunk by chunk.
		if text != said.Text {
			t.Errorf("%s %s: text %q, the engine said %q", c.Req.ID, c.Leg, text, said.Text)
		}
		return
	}
	want := said.TokenIDs
	if n := len(want); n > 0 && slices.Contains(c.Req.StopTokens, want[n-1]) {
		want = want[:n-1]
	}
	if c.Req.MaxTokens > 0 && len(want) > c.Req.MaxTokens {
		want = want[:c.Req.MaxTokens]
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s %s: tokens %v, the engine said %v", c.Req.ID, c.Leg, got, want)
	}
}
