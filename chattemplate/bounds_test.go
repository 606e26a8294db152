package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTemplatesThatNeverEndAreStopped: each of these would, run by the library
// alone, hang the request or crash the process (a Go stack overflow is fatal).
func TestTemplatesThatNeverEndAreStopped(t *testing.T) {
	alphabet := "'abcdefghijklmnopqrstuvwxyz'"
	for _, tc := range []struct{ name, src, want string }{
		{"macro calling itself", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "nested more than 64"},
		{"macros calling each other", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}", "nested more than 64"},
		{"recursion through caller", "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}", "nested more than 64"},
		// These two stop at the iteration bound, or at the time bound first on a
		// slow machine (-race): either is ErrLimit.
		{"loops nested over strings", strings.Repeat("{% for x in "+alphabet+" %}", 5) + "x" + strings.Repeat("{% endfor %}", 5), "ran past its limit"},
		{"a huge range", "{% for i in range(1000000000) %}x{% endfor %}", "range of 1000000000 items"},
		{"ranges that add up", "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "ran past its limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := New(tc.src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = tmpl.Render([]Message{{Role: "user", Content: "hi"}}, true)
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrLimit mentioning %q", err, tc.want)
			}
			t.Logf("stopped after %v: %v", time.Since(start), err)
		})
	}
}

// TestDeepRecursionThatEndsIsAllowed: a macro may call itself while its depth is
// bounded (templates render nested JSON schemas this way).
func TestDeepRecursionThatEndsIsAllowed(t *testing.T) {
	tmpl, err := New("{% macro f(n) %}{% if n > 0 %}({{ f(n - 1) }}){% endif %}{% endmacro %}{{ f(60) }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("(", 60) + strings.Repeat(")", 60); got != want {
		t.Fatalf("got %q", got)
	}
}

func TestRenderTimeIsBounded(t *testing.T) {
	b := newBudget(time.Now().Add(-2 * maxRenderTime))
	_, err := b.step(nil, nil)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "longer than 10s") {
		t.Fatalf("a step past the deadline: err = %v", err)
	}
}

// TestRangeIsPythons checks the replacement range, including the case where the
// library's own loops for ever (its counter overflows int64).
func TestRangeIsPythons(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"range(4)", "[0, 1, 2, 3]"},
		{"range(2, 5)", "[2, 3, 4]"},
		{"range(10, 0, -3)", "[10, 7, 4, 1]"},
		{"range(0)", "[]"},
		{"range(5, 2)", "[]"},
		{"range(0, 9223372036854775807, 4611686018427387904)", "[0, 4611686018427387904]"},
		{"range(-9223372036854775807, 9223372036854775807, 9223372036854775807)", "[-9223372036854775807, 0]"},
	} {
		tmpl, err := New("{{ "+tc.expr+" }}", Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(nil, false)
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
	for _, expr := range []string{"range(1, 2, 0)", "range('a')", "range()", "range(1, 2, 3, 4)"} {
		tmpl, _ := New("{{ "+expr+" }}", Options{})
		if _, err := tmpl.Render(nil, false); err == nil {
			t.Errorf("%s: no error", expr)
		}
	}
}

func TestLibraryPanicsBecomeErrors(t *testing.T) {
	tmpl, err := New("{{ 'a' * -1 }}", Options{}) // strings.Repeat panics on a negative count
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(nil, false)
	if err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("err = %v, want the panic as an error", err)
	}
}

// TestNestingTheParserCannotTake: the library parses recursively; a template
// nested thousands deep is refused before it can exhaust the stack.
func TestNestingTheParserCannotTake(t *testing.T) {
	for name, src := range map[string]string{
		"brackets": "{{ " + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000) + " }}",
		"blocks":   strings.Repeat("{% if true %}", 5000) + strings.Repeat("{% endif %}", 5000),
		"size":     strings.Repeat("x", maxSourceLen+1),
	} {
		if _, err := New(src, Options{}); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestConcurrentRenders renders shared templates from many goroutines (run with
// -race): every render must equal the one done alone.
func TestConcurrentRenders(t *testing.T) {
	var tmpls []*Template
	for _, f := range []string{"llama-3.1-instruct.jinja", "qwen3.jinja", "mistral-nemo-instruct-2407.jinja"} {
		tmpl, err := New(readTemplate(t, f), Options{BOSToken: "<s>", EOSToken: "</s>"})
		if err != nil {
			t.Fatal(err)
		}
		tmpls = append(tmpls, tmpl)
	}
	conv := func(i int) []Message {
		msgs := []Message{{Role: "system", Content: fmt.Sprintf("system %d", i)}}
		for j := 0; j <= i%5; j++ {
			msgs = append(msgs, Message{Role: "user", Content: fmt.Sprintf("question %d.%d", i, j)}, Message{Role: "assistant", Content: fmt.Sprintf("answer %d.%d", i, j)})
		}
		return append(msgs, Message{Role: "user", Content: "last"})
	}
	const n = 40
	want := make([][]string, len(tmpls))
	for k, tmpl := range tmpls {
		for i := range n {
			out, err := tmpl.Render(conv(i), true)
			if err != nil {
				t.Fatal(err)
			}
			want[k] = append(want[k], out)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(tmpls)*n)
	for g := range 8 {
		wg.Go(func() {
			for k, tmpl := range tmpls {
				for i := range n {
					i := (i + g*7) % n
					out, err := tmpl.Render(conv(i), true)
					if err != nil || out != want[k][i] {
						errs <- fmt.Errorf("template %d, conversation %d: %q, %v", k, i, out, err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestValuesThatContainThemselves: the library prints and serializes values
// recursively, so a value that contains itself would overflow the Go stack, which
// kills the process. Such a value is refused where it would be made, as are values
// too deep or too long to print.
func TestValuesThatContainThemselves(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"namespace in itself", "{% set ns = namespace() %}{% set ns.x = ns %}{{ ns.x }}", "namespace inside itself"},
		{"through a list", "{% set ns = namespace() %}{% set ns.x = [1, [ns]] %}{{ ns }}", "namespace inside itself"},
		{"through another namespace", "{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}{{ a | tojson }}", "namespace inside itself"},
		{"a dict as a namespace", "{% set d = {'k': 1} %}{% set d.k = {'d': d} %}{{ d }}", "namespace inside itself"},
		{"list.append", "{% set l = [1] %}{{ l.append(l) }}{{ l }}", "sandbox forbids too: l.append is not callable"},
		{"dict.update", "{% set d = {'a': 1} %}{% set _ = d . update({'b': d}) %}{{ d }}", "sandbox forbids too"},
		// Not cycles, but as fatal in practice: minutes to print, or 2^60 items.
		{"nested by a loop", "{% for i in range(100000) %}{% set x = [x] %}{% if loop.last %}{{ x }}{% endif %}{% endfor %}", "nested more than 128 deep"},
		{"doubled by a loop", "{% set ns = namespace(x=[]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}",
			"more than 262144 lists and dicts once printed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := New(tc.src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tmpl.Render(nil, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	tmpl, err := New("{% set ns = namespace(roles=[], n=0) %}{% for m in messages %}{% set ns.roles = ns.roles + [m.role] %}{% set ns.n = "+
		"ns.n + 1 %}{% endfor %}{{ ns.roles | join(',') }}={{ ns.n }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}, false); err != nil || got != "user,assistant=2" {
		t.Fatalf("accumulating in a namespace: %q, %v", got, err)
	}
}
