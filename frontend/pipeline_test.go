package frontend

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// truncateAtStop is the specification: the text before the earliest stop string.
func truncateAtStop(text string, stops []string) (string, bool) {
	cut := -1
	for _, s := range stops {
		if i := strings.Index(text, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut < 0 {
		return text, false
	}
	return text[:cut], true
}

// TestStopMatcherMatchesSpec feeds text in random rune-aligned pieces and checks
// the streamed output equals truncating the whole text, and that nothing past the
// stop point is ever released.
func TestStopMatcherMatchesSpec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	texts := []string{
		"alpha beta gamma delta",
		"no stop here at all",
		"abababababc",
		"日本語のテキスト🤖と中文 END 後",
		"<|im_start|>assistant\nhi<|im_end|>\n<|im",
		"xx<|im_en",
	}
	stopSets := [][]string{{"a gam"}, {"abc", "bab"}, {"END", "🤖と"}, {"<|im_end|>"}, {"zzz"}, {"ta", "a d"}}
	for _, text := range texts {
		for _, stops := range stopSets {
			want, wantStopped := truncateAtStop(text, stops)
			for trial := 0; trial < 20; trial++ {
				m := stopMatcher{stops: stops}
				var got strings.Builder
				stopped := false
				rest := text
				for rest != "" && !stopped {
					n := 1 + rng.IntN(len(rest))
					for !utf8.ValidString(rest[:n]) {
						n++
					}
					out, s := m.push(rest[:n])
					rest = rest[n:]
					got.WriteString(out)
					stopped = s
					if !strings.HasPrefix(want, got.String()) {
						t.Fatalf("text %q stops %q: released %q, not a prefix of %q", text, stops, got.String(), want)
					}
				}
				if !stopped {
					got.WriteString(m.flush())
				}
				if got.String() != want || stopped != wantStopped {
					t.Fatalf("text %q stops %q: got %q stopped=%v, want %q stopped=%v", text, stops, got.String(), stopped, want, wantStopped)
				}
			}
		}
	}
}

func TestStopMatcherHoldsOnlyWhatCouldStillMatch(t *testing.T) {
	m := stopMatcher{stops: []string{"STOP"}}
	if out, _ := m.push("abcST"); out != "abc" {
		t.Errorf("released %q, want abc with ST held", out)
	}
	if out, _ := m.push("x"); out != "STx" {
		t.Errorf("released %q once the match became impossible, want STx", out)
	}
}

func TestChatMLTemplate(t *testing.T) {
	got, err := ChatML{}.Apply([]Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}, {Role: "assistant", Content: "A"}, {Role: "user", Content: "U2"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n" +
		"<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if _, err := (ChatML{}).Apply([]Message{{Role: "robot", Content: "x"}}); err == nil {
		t.Error("tool role accepted")
	}
}

// TestChatStopsAtEndOfTurn: a model that writes "<|im_end|>" has ended its turn,
// so chat output stops there while a raw completion does not.
func TestChatStopsAtEndOfTurn(t *testing.T) {
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode("Sure.<|im_end|>\n<|im_start|>user\nmore"), perMsg: 1}
	f, _ := newTestFrontend(t, testConfig(), b)
	h := f.HTTPHandler()
	r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if !strings.Contains(r.body, `"content":"Sure."`) || !strings.Contains(r.body, `"finish_reason":"stop"`) {
		t.Errorf("chat: %s", r.body)
	}
	r = do(t, h, "POST", "/v1/completions", `{"prompt":"hi"}`)
	if !strings.Contains(r.body, `im_end`) {
		t.Errorf("completion was cut at the chat marker: %s", r.body)
	}
}

// TestCompletionTokensCountBackendStopToken: a backend that drew EOS without
// sending it reports one more completion token than it streamed; usage follows
// the backend.
func TestCompletionTokensCountBackendStopToken(t *testing.T) {
	tok := testTokenizer(t)
	out := tok.Encode("four token answer")
	b := &fakeBackend{output: out, reportCompletion: uint32(len(out) + 1)}
	f, _ := newTestFrontend(t, testConfig(), b)
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"prompt":"hi"}`)
	if want := `"completion_tokens":` + itoaT(len(out)+1); !strings.Contains(r.body, want) {
		t.Errorf("body %s lacks %s", r.body, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := Config{MaxBodyBytes: 10, DefaultMaxTokens: 0, DefaultTemperature: 3}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, word := range []string{"max body", "max tokens", "temperature"} {
		if !strings.Contains(err.Error(), word) {
			t.Errorf("error %q does not mention %s", err, word)
		}
	}
}
