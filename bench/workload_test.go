package bench

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func testPrompts(t *testing.T) *Prompts {
	t.Helper()
	p, err := CL100KPrompts()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPromptsHaveExactTokenCounts(t *testing.T) {
	p := testPrompts(t)
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for _, n := range []int{1, 2, 16, 64, 257, 2048} {
		for range 3 {
			s, err := p.Make(rng, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(p.Tokenizer().Encode(s)); got != n {
				t.Errorf("a %d-token prompt encodes to %d tokens", n, got)
			}
			// Distinct prompts, so none hits another's prefix cache by accident.
			first := strings.Fields(s)[0]
			if n >= 16 && seen[s[:min(len(s), 80)]] {
				t.Errorf("two %d-token prompts share their start %q", n, first)
			}
			seen[s[:min(len(s), 80)]] = true
		}
	}
	if _, err := p.Make(rng, 0); err == nil {
		t.Error("Make(0) succeeded")
	}
}

func TestParseMix(t *testing.T) {
	cs, err := ParseMix("0.8:64/32, short=0.2:2048/64")
	if err != nil {
		t.Fatal(err)
	}
	want := []Class{{Name: "64/32", Weight: 0.8, ISL: 64, OSL: 32}, {Name: "short", Weight: 0.2, ISL: 2048, OSL: 64}}
	if len(cs) != 2 || cs[0] != want[0] || cs[1] != want[1] {
		t.Errorf("ParseMix = %+v, want %+v", cs, want)
	}
	for _, bad := range []string{"", "0.8:64", "x:64/32", "0:64/32", "1:0/32", "1:64/-1", "1:64/32,1:64/32"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

func TestMixedDrawsClassesByWeight(t *testing.T) {
	p := testPrompts(t)
	m, err := NewMixed(p, []Class{{Name: "short", Weight: 4, ISL: 8, OSL: 2}, {Name: "long", Weight: 1, ISL: 40, OSL: 3}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	count := map[string]int{}
	const n = 2000
	for range n {
		r, err := m.Next(rng)
		if err != nil {
			t.Fatal(err)
		}
		count[r.Class]++
		want := map[string][2]int{"short": {8, 2}, "long": {40, 3}}[r.Class]
		if r.PromptTokens != want[0] || r.MaxTokens != want[1] {
			t.Fatalf("class %s: %d prompt tokens, max %d; want %v", r.Class, r.PromptTokens, r.MaxTokens, want)
		}
	}
	// 80% short; the seed is fixed, so this is deterministic, and 5 points is
	// more than 7 standard deviations of a binomial at n = 2000.
	if f := float64(count["short"]) / n; f < 0.75 || f > 0.85 {
		t.Errorf("short share %.3f, want about 0.8 (%v)", f, count)
	}
}

func TestSharedPrefixCarriesTheConversation(t *testing.T) {
	p := testPrompts(t)
	w, err := NewSharedPrefix(p, SharedPrefixConfig{PrefixTokens: 32, TurnTokens: 8, OutputTokens: 4, Turns: 3, Conversations: 1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var system string
	for i, wantClass := range []string{"turn-1", "turn-2", "turn-3", "turn-1"} {
		r, err := w.Next(rng)
		if err != nil {
			t.Fatal(err)
		}
		if r.Class != wantClass {
			t.Fatalf("request %d is %s, want %s", i, r.Class, wantClass)
		}
		if i == 0 {
			system = r.Messages[0].Content
		}
		if r.Messages[0].Role != "system" || r.Messages[0].Content != system || p.Count(system) != 32 {
			t.Errorf("request %d does not start with the shared 32-token system prompt", i)
		}
		turn := i%3 + 1
		if len(r.Messages) != 2*turn {
			t.Errorf("request %d has %d messages, want %d (system, history, question)", i, len(r.Messages), 2*turn)
		}
		if turn > 1 && r.Messages[len(r.Messages)-2].Content != "answer" {
			t.Errorf("request %d does not carry the previous answer: %+v", i, r.Messages)
		}
		w.Done(r, &Result{text: "answer"})
	}
	// A second request while the only conversation waits opens another one.
	a, _ := w.Next(rng)
	b, _ := w.Next(rng)
	if a.conv == b.conv || b.Class != "turn-1" {
		t.Error("a busy conversation was continued before its answer came")
	}
	// A failure starts the conversation again.
	w.Done(a, &Result{Err: "boom"})
	if c, _ := w.Next(rng); c.Class != "turn-1" {
		t.Errorf("after a failure the next turn is %s, want turn-1", c.Class)
	}
}

func TestReadJSONL(t *testing.T) {
	p := testPrompts(t)
	j, err := ReadJSONL(strings.NewReader(`{"prompt": " hello world", "max_tokens": 5}

{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "class": "chat"}
`), p)
	if err != nil {
		t.Fatal(err)
	}
	var got []Request
	for range 3 {
		r, _ := j.Next(nil)
		got = append(got, r)
	}
	if got[0].Prompt != " hello world" || got[0].MaxTokens != 5 || got[0].Class != "jsonl" || got[0].PromptTokens != 2 {
		t.Errorf("line 1 = %+v", got[0])
	}
	if got[1].Class != "chat" || len(got[1].Messages) != 1 || got[1].MaxTokens != 2 {
		t.Errorf("line 3 = %+v", got[1])
	}
	if got[2].Prompt != got[0].Prompt {
		t.Error("the file does not cycle")
	}
	for _, bad := range []string{
		`{"prompt": "x", "max_token": 5}`,
		`{"prompt": "x", "messages": [{"role":"user","content":"y"}], "max_tokens": 5}`,
		`{"max_tokens": 5}`,
		`{"prompt": "x"}`,
		`{"prompt": "x", "max_tokens": 5`,
		``,
	} {
		if _, err := ReadJSONL(strings.NewReader(bad), nil); err == nil {
			t.Errorf("ReadJSONL accepted %q", bad)
		}
	}
}

// --ignore-eos asks for exactly each class's OSL, and the result is checked
// against it; without it a request asks only for max_tokens.
func TestMixedIgnoreEOS(t *testing.T) {
	classes := []Class{{Name: "a", Weight: 1, ISL: 8, OSL: 5}}
	for _, on := range []bool{false, true} {
		o := Options{IgnoreEOS: on}
		w, err := o.eos(NewMixed(testPrompts(t), classes))
		if err != nil {
			t.Fatal(err)
		}
		r, err := w.Next(rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if on {
			want = 5
		}
		if r.IgnoreEOS != on || r.WantTokens != want || r.MaxTokens != 5 {
			t.Errorf("--ignore-eos=%v: ignore_eos %v, want tokens %d, max %d; want %v, %d, 5", on, r.IgnoreEOS, r.WantTokens, r.MaxTokens, on, want)
		}
	}
	if _, err := (&Options{}).eos(NewMixed(testPrompts(t), nil)); err == nil {
		t.Error("an empty mix accepted")
	}
}
