package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzRender compiles an arbitrary template and renders an arbitrary conversation
// with it. Whatever the input, New and Render return (the fuzz run would report a
// panic or a hang); a render either succeeds, is the template's refusal
// (*RaiseError), hits a bound (ErrLimit), or fails with an error of its own.
//
// Sources that multiply or indent are skipped: `'x' * 10**11` and `indent(10**11)`
// allocate without bound in one step of the library, before any check of this
// package can run (see the package documentation).
//
//	go test ./chattemplate -run '^$' -fuzz FuzzRender -fuzztime 60s
func FuzzRender(f *testing.F) {
	seeds := []string{
		"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
		"{%- if messages[0]['role'] == 'system' -%}{{ raise_exception('no system') }}{%- endif %}{{ bos_token }}",
		"{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
		"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
		"{% set ns = namespace(x=0) %}{% for i in range(5) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
		"{% raw %}{{ x }}{% endraw %}{# c #}{{- ' a ' -}}  {%+ if true +%}\n{% endif %}",
		"{{ {'a': {'b': '}}'}} | tojson }}{{ '\\x41\\u00e9' }}{{ messages[::-1] | map(attribute='role') | join }}",
		"{{ messages[0].content.strip().split(' ')[0].upper() }}{{ 'x' if loop is defined else 'y' }}",
		"{% for x in 'abc' %}{% for y in 'abc' %}{{ loop.index }}{% endfor %}{% endfor %}",
		"{% if x %}{% for y in z %}",
		"{{ 1 + }}",
	}
	for _, file := range []string{"chatml.jinja", "llama-2-chat.jinja", "llama-3-instruct.jinja", "gemma-it.jinja", "zephyr.jinja", "qwen2-instruct.jinja"} {
		src, err := os.ReadFile(filepath.Join("testdata", "templates", file))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, string(src))
	}
	for _, s := range seeds {
		f.Add(s, "user", "Hello {{ there }} {% if %}", true)
	}
	f.Add("{{ messages[1].content }}", "system", "", false)

	f.Fuzz(func(t *testing.T, source, role, content string, addGenerationPrompt bool) {
		if strings.Contains(source, "*") || strings.Contains(source, "indent") {
			t.Skip("allocates without bound in one step of the library")
		}
		tmpl, err := New(source, Options{BOSToken: "<s>", EOSToken: "</s>", Now: func() time.Time { return time.Unix(0, 0) }})
		if err != nil {
			if tmpl != nil {
				t.Fatal("New returned a template and an error")
			}
			return
		}
		msgs := []Message{{Role: "system", Content: "You are helpful."}, {Role: role, Content: content}, {Role: "assistant", Content: content}, {Role: "user", Content: role}}
		out, err := tmpl.Render(msgs, addGenerationPrompt)
		if err != nil {
			if out != "" {
				t.Fatalf("Render returned output %q with error %v", out, err)
			}
			var re *RaiseError
			if errors.As(err, &re) || errors.Is(err, ErrLimit) {
				return
			}
			if !strings.HasPrefix(err.Error(), "chattemplate: ") {
				t.Fatalf("error %q does not say where it comes from", err)
			}
		}
	})
}
