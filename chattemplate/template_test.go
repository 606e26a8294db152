package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// realCase is one entry of testdata/cases.json: a model's own template rendered by
// the reference (Python's Jinja2 with transformers' settings, see gen_cases.py).
type realCase struct {
	Name                string    `json:"name"`
	Template            string    `json:"template"` // a file of testdata/templates
	Source              string    `json:"source"`   // or the template itself
	BOSToken            string    `json:"bos_token"`
	EOSToken            string    `json:"eos_token"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
	Messages            []Message `json:"messages"`
	Want                *string   `json:"want"`
	WantError           string    `json:"want_error"`
}

type realCases struct {
	Now   time.Time  `json:"now"`
	Cases []realCase `json:"cases"`
}

func loadCases(t testing.TB) realCases {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rc realCases
	if err := json.Unmarshal(raw, &rc); err != nil {
		t.Fatal(err)
	}
	if len(rc.Cases) == 0 {
		t.Fatal("testdata/cases.json has no cases")
	}
	return rc
}

func readTemplate(t testing.TB, file string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "templates", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// TestRealTemplates renders the templates of popular models (Llama 2, 3, 3.1, 3.2,
// Mistral, Mixtral, Zephyr/TinyLlama, Qwen 1.5 to 3, Phi-3, SmolLM2, Gemma,
// DeepSeek) over conversations with and without a system turn, content full of
// Jinja syntax and markers, roles out of order and a role the template does not
// know, with and without the generation prompt; then small templates on each
// feature templates use (whitespace control above all). Each must give the
// reference's text byte for byte, or the template's own refusal as a *RaiseError.
func TestRealTemplates(t *testing.T) {
	rc := loadCases(t)
	compiled := map[string]*Template{}
	for _, c := range rc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			src := c.Source
			if c.Template != "" {
				src = readTemplate(t, c.Template)
			}
			key := src + "\x00" + c.BOSToken + "\x00" + c.EOSToken
			tmpl := compiled[key]
			if tmpl == nil {
				var err error
				tmpl, err = New(src, Options{
					BOSToken: c.BOSToken, EOSToken: c.EOSToken,
					Now: func() time.Time { return rc.Now },
				})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				compiled[key] = tmpl
			}
			got, err := tmpl.Render(c.Messages, c.AddGenerationPrompt)
			if c.Want == nil {
				var re *RaiseError
				if !errors.As(err, &re) {
					t.Fatalf("Render = %q, %v; want the template's exception %q", got, err, c.WantError)
				}
				if re.Error() != c.WantError {
					t.Fatalf("exception %q, want %q", re.Error(), c.WantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != *c.Want {
				t.Fatalf("Render differs from the reference at byte %d:\n got %q\nwant %q", firstDiff(got, *c.Want), got, *c.Want)
			}
		})
	}
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestRaiseErrorKeepsTheTemplatesMessage(t *testing.T) {
	tmpl, err := New(readTemplate(t, "llama-2-chat.jinja"), Options{BOSToken: "<s>", EOSToken: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, true)
	const want = "Conversation roles must alternate user/assistant/user/assistant/..."
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want exactly %q", err, want)
	}
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != want {
		t.Fatalf("err = %#v, want a *RaiseError with the message", err)
	}
}

func TestSyntaxErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"unclosed for", "{% for m in messages %}\n{{ m.content }}\n", []string{"line 1, col 1", "{% for %}", "endfor"}},
		{"unclosed if inside for", "{% for m in messages %}\n  {% if m.role == 'user' %}x\n{% endfor %}", []string{"line 2, col 3", "{% if %}"}},
		{"bad expression", "ok\n{{ message['content' + }}", []string{"line 2"}},
		{"unclosed tag", "ok\nok {{ message.content \n", []string{"line 2, col 4", "never closed"}},
		{"unknown statement", "a\nb\n{% include 'x.jinja' %}", []string{"line 3", "include"}},
		{"stray end", "{% endif %}", []string{"line 1", "endif"}},
		{"lines removed by whitespace control", "{%- if true -%}\n{# a\ncomment #}\n  {{- 'a\\nb' -}}\n\n{{ 1 + }}\n{% endif %}", []string{"line 6"}},
		{"empty statement", "a\n{% %}b", []string{"line 2, col 1", "name"}},
		{"empty", " \n", []string{"empty"}},
		{"reserved name", "{{ __tandem_step() }}", []string{"reserved"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.src, Options{})
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestTemplateErrorsAreNotRaiseErrors(t *testing.T) {
	tmpl, err := New("{{ messages | no_such_filter }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "user", Content: "hi"}}, true)
	var re *RaiseError
	if err == nil || errors.As(err, &re) || errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want a plain template failure", err)
	}
	if !strings.Contains(err.Error(), "no_such_filter") {
		t.Fatalf("err = %v, want it to name the filter", err)
	}
}

// TestWhatTemplatesSee checks the variables transformers gives a template, one by
// one, including those a conversation template probes for tools.
func TestWhatTemplatesSee(t *testing.T) {
	now := time.Date(2025, 3, 7, 9, 5, 3, 0, time.UTC)
	src := `{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages | length }}|` +
		`{{ messages[0].role }}={{ messages[0]['content'] }}|{{ tools is none }}|{{ documents is none }}|` +
		`{{ tools is defined }}|{{ strftime_now("%d %b %Y, %-d %B, %A %H:%M:%S %p %j") }}|` +
		`{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{% endfor %}|` +
		`{{ range(3) | join(',') }}|{{ range(5, 0, -2) | join(',') }}|{{ enable_thinking is defined }}`
	tmpl, err := New(src, Options{BOSToken: "<s>", EOSToken: "</s>", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "<s>|</s>|False|2|user=hi|True|True|True|07 Mar 2025, 7 March, Friday 09:05:03 AM 066|" +
		"0TrueFalse1FalseTrue|0,1,2|5,3,1|False"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestFallback(t *testing.T) {
	fb := Fallback()
	if !fb.IsFallback() {
		t.Fatal("Fallback().IsFallback() = false")
	}
	msgs := []Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "Hello"},
		{Role: "assistant", Content: "Hi."},
		{Role: "user", Content: "Why is the sky blue?\nBriefly."},
	}
	got, err := fb.Render(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "System: You are terse.\nUser: Hello\nAssistant: Hi.\nUser: Why is the sky blue?\nBriefly.\nAssistant:"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	got, _ = fb.Render(msgs[:2], false)
	if want := "System: You are terse.\nUser: Hello\n"; got != want {
		t.Fatalf("without the generation prompt: got %q, want %q", got, want)
	}
	if stops := fb.StopStrings(); len(stops) != 2 || stops[0] != "\nUser:" {
		t.Fatalf("StopStrings = %q", stops)
	}
	model, err := New(readTemplate(t, "chatml.jinja"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if model.IsFallback() || model.StopStrings() != nil {
		t.Fatalf("a model's template: IsFallback %v, StopStrings %q", model.IsFallback(), model.StopStrings())
	}
}
