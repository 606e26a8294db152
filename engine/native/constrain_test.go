package native

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/constrain"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/tokenizer"
)

const recordSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},
 "ok":{"type":"boolean"},"pets":{"type":"array","items":{"enum":["cat","dog"]},"maxItems":2}},"required":["name","age","ok"]}`

type record struct {
	Name string   `json:"name"`
	Age  int64    `json:"age"`
	OK   bool     `json:"ok"`
	Pets []string `json:"pets"`
}

func checkRecord(t *testing.T, text string) {
	t.Helper()
	var r record
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || dec.More() {
		t.Fatalf("%q does not parse as the schema's object: %v", text, err)
	}
	if len([]rune(r.Name)) > 12 || len(r.Pets) > 2 {
		t.Fatalf("%q breaks the schema's bounds", text)
	}
}

// Random weights say nothing of JSON: only the mask makes the text valid.
func TestConstrainedRandomWeights(t *testing.T) {
	e := newTestEngine(t, Config{})
	tok, err := tokenizer.CL100K()
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(20) {
		sp := engine.Sampling{Temperature: 1, Seed: seed, Constraint: &engine.Constraint{JSONSchema: recordSchema}}
		if seed%2 == 1 {
			sp.TopK, sp.TopP = 40, 0.9
		}
		out, st := generate(t, e, engine.Request{Prompt: testPrompt(20, uint32(seed)), MaxTokens: 300, StopTokens: []uint32{EndOfText}, Sampling: sp})
		if st.Finish() != engine.FinishStop {
			t.Fatalf("seed %d: finish %v after %d tokens", seed, st.Finish(), len(out))
		}
		checkRecord(t, tok.Decode(out))
	}
	waitIdle(t, e)
}

// The prefill worker draws the first token under the constraint; the decode
// worker reads it into its own matcher and goes on exactly as one engine would.
func TestConstrainedAcrossHandoff(t *testing.T) {
	tok, _ := tokenizer.CL100K()
	for _, seed := range []uint64{3, 4} {
		req := engine.Request{ID: "c", Prompt: testPrompt(40, 9), MaxTokens: 300, StopTokens: []uint32{EndOfText},
			Sampling: engine.Sampling{Temperature: 1, Seed: seed, Constraint: &engine.Constraint{JSONSchema: recordSchema}}}
		want, _ := generate(t, newTestEngine(t, Config{}), req)
		st := transfer(t, newTestEngine(t, Config{}), newTestEngine(t, Config{}), req, 0)
		got := testutil.Drain(t, context.Background(), st)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: imported %v, local %v", seed, got, want)
		}
		checkRecord(t, tok.Decode(got))
	}
}

func TestConstrainedPrefixRepeat(t *testing.T) {
	e := newTestEngine(t, Config{})
	tok, _ := tokenizer.CL100K()
	c := &engine.Constraint{JSONSchema: `{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"required":["name","arguments"]}`,
		Prefix: "<tool_call>\n", Suffix: "\n</tool_call>", Repeat: true, Separator: "\n"}
	for seed := range uint64(5) {
		out, _ := generate(t, e, engine.Request{Prompt: testPrompt(10, 3), MaxTokens: 200, StopTokens: []uint32{EndOfText},
			Sampling: engine.Sampling{Temperature: 1, Seed: seed, Constraint: c}})
		text := tok.Decode(out)
		if !strings.HasPrefix(text, "<tool_call>\n{\"name\":") {
			t.Fatalf("seed %d: %q", seed, text)
		}
	}
}

func TestConstraintRefused(t *testing.T) {
	e := newTestEngine(t, Config{})
	req := engine.Request{Prompt: testPrompt(10, 3), Sampling: engine.Sampling{Constraint: &engine.Constraint{JSONSchema: `{"type":"string","pattern":"x"}`}}}
	if _, err := e.Generate(context.Background(), req); !errors.Is(err, engine.ErrBadConstraint) || !strings.Contains(err.Error(), "pattern") {
		t.Fatalf("a pattern schema: %v", err)
	}
}

// A constrained greedy draw is the most likely token among those allowed, on each
// of the draw's paths (few allowed, many allowed, stop tokens once complete). The
// stop token here, 7, spells "(": allowed inside a string by the mask, it still
// waits for the text to be complete, since drawing it ends the answer.
func TestConstrainedGreedyIsMaskedArgmax(t *testing.T) {
	const vocab = 4096
	tok, _ := tokenizer.CL100K()
	a, err := constrain.NewCache(vocabulary(tok, vocab), 1).Automaton(constrain.Spec{JSONSchema: `{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3}`})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	sc := &sched{e: &Engine{mc: ModelConfig{VocabSize: vocab}}}
	s := &sequence{req: engine.Request{StopTokens: []uint32{7}}}
	for round := range 20 {
		m := a.NewMatcher()
		for step := 0; step < 40 && !m.Final(); step++ {
			logits := make([]float32, vocab)
			for i := range logits {
				logits[i] = float32(rng.NormFloat64())
			}
			if step%2 == 1 {
				logits[7] = 10 // the model wants to stop
			}
			want, mask := -1, m.Mask()
			for i := range vocab {
				ok := constrain.Allowed(mask, uint32(i)) && i != 7 || i == 7 && m.Complete()
				if ok && (want < 0 || logits[i] > logits[want]) {
					want = i
				}
			}
			got, ok := sc.drawConstrained(s, m, logits, engine.Sampling{})
			if !ok || int(got) != want {
				t.Fatalf("round %d step %d: drew %d (%v), want %d", round, step, got, ok, want)
			}
			if got == 7 {
				break
			}
			m.Advance(got)
		}
	}
}
