package chattemplate

import (
	"fmt"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// tenMessages is a system turn and nine alternating turns of a few sentences.
func tenMessages() []Message {
	msgs := []Message{{Role: "system", Content: "You are a helpful assistant. Answer briefly and cite the source when you can."}}
	for i := range 9 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, Message{Role: role, Content: fmt.Sprintf("Turn %d: the quick brown fox jumps over the lazy dog, twice, and asks why the sky is blue at noon.", i)})
	}
	return msgs
}

// BenchmarkRender renders a 10-message conversation per op, as the frontend does
// per request.
//
//	go test ./chattemplate -run '^$' -bench Render -benchmem
func BenchmarkRender(b *testing.B) {
	msgs := tenMessages()
	for _, file := range []string{"llama-3.1-instruct.jinja", "llama-3-instruct.jinja", "qwen2.5-instruct.jinja", "chatml.jinja"} {
		b.Run(file, func(b *testing.B) {
			tmpl, err := New(readTemplate(b, file), Options{BOSToken: "<|begin_of_text|>", EOSToken: "<|eot_id|>"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := tmpl.Render(msgs, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("fallback", func(b *testing.B) {
		for b.Loop() {
			Fallback().Render(msgs, true)
		}
	})
}

// BenchmarkRenderLibraryAlone renders the same template with the library on its
// own, without this package's rewrite and bounds: the difference with
// BenchmarkRender/llama-3.1-instruct.jinja is what they cost.
func BenchmarkRenderLibraryAlone(b *testing.B) {
	tmpl, err := jinja.Compile(normalizeNewlines(readTemplate(b, "llama-3.1-instruct.jinja")))
	if err != nil {
		b.Fatal(err)
	}
	msgs := tenMessages()
	t := &Template{opts: Options{BOSToken: "<|begin_of_text|>", EOSToken: "<|eot_id|>"}}
	for b.Loop() {
		data, _ := t.data(msgs, nil, true, newBudget(time.Now()))
		if _, err := tmpl.RenderValues(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNew(b *testing.B) {
	src := readTemplate(b, "llama-3.1-instruct.jinja")
	for b.Loop() {
		if _, err := New(src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
