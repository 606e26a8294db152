package bench

import (
	"strings"
	"testing"
)

func TestParseTraceSources(t *testing.T) {
	got, err := ParseTraceSources("a.jsonl@0+600, b.jsonl@100+50,c.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceSource{{"a.jsonl", 0, 600}, {"b.jsonl", 100, 50}, {"c.jsonl", -1, 0}}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("ParseTraceSources = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "a@", "a@1", "a@x+1", "a@1+0", "a@-1+3", "@0+1", "a.jsonl,"} {
		if _, err := ParseTraceSources(bad); err == nil {
			t.Errorf("ParseTraceSources(%q) accepted", bad)
		}
	}
}

func FuzzParseTraceSources(f *testing.F) {
	for _, s := range []string{"a.jsonl@0+600,b.jsonl@100+50", "a", "a@1+", "@", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		srcs, err := ParseTraceSources(s)
		if err != nil {
			return
		}
		for _, src := range srcs {
			if src.File == "" || (src.Start >= 0 && src.Limit < 1) || src.Start < -1 {
				t.Fatalf("ParseTraceSources(%q) accepted %+v", s, src)
			}
		}
	})
}

// Two windows of one trace replayed one after the other: the second starts
// after the first, a mean gap later, and shares none of its blocks.
func TestConcatWindowsPlan(t *testing.T) {
	p, err := tracePlanOf(t, "--trace", testTrace+"@0+20,"+testTrace+"@0+20")
	if err != nil {
		t.Fatal(err)
	}
	wl, err := p.load(0)
	if err != nil {
		t.Fatal(err)
	}
	tr := wl.(*TraceReplay)
	if tr.Len() != 40 || !strings.Contains(tr.Name(), " then ") {
		t.Fatalf("replay %q of %d requests, want both windows' 40", tr.Name(), tr.Len())
	}
	first, second := tr.reqs[:20], tr.reqs[20:]
	ids := map[int64]bool{}
	for _, r := range first {
		for _, h := range r.HashIDs {
			ids[h] = true
		}
	}
	gap := first[19].At / 19
	if second[0].At != first[19].At+gap {
		t.Errorf("second window starts at %v, want %v (the first's last arrival and a mean gap)", second[0].At, first[19].At+gap)
	}
	for i, r := range second {
		if r.At-second[0].At != first[i].At-first[0].At || r.InputLength != first[i].InputLength {
			t.Fatalf("request %d of the second window differs from the first's: %+v vs %+v", i, r, first[i])
		}
		for _, h := range r.HashIDs {
			if ids[h] {
				t.Fatalf("the windows share block %d", h)
			}
		}
	}
}
