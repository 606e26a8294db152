package doccheck

import (
	"reflect"
	"testing"
)

func TestSplitShell(t *testing.T) {
	text := "make build   # bin/tandem\n" +
		"bin/tandem bench compare --worker-args '--engine sim --sim-time-scale 4' \\\n" +
		"  --deployments \"slo@2{--ttft-slo-ms 8000}\" --out runs/x\n" +
		"bin/tandem up --model tiny --http-addr 127.0.0.1:18491 &\n" +
		"curl -d '{\"a\":1,\n  \"b\":2}' http://x | tr a b; echo ${#body}"
	got, err := SplitShell(text, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{10, []string{"make", "build"}},
		{11, []string{"bin/tandem", "bench", "compare", "--worker-args", "--engine sim --sim-time-scale 4",
			"--deployments", "slo@2{--ttft-slo-ms 8000}", "--out", "runs/x"}},
		{13, []string{"bin/tandem", "up", "--model", "tiny", "--http-addr", "127.0.0.1:18491"}},
		{14, []string{"curl", "-d", "{\"a\":1,\n  \"b\":2}", "http://x"}},
		{15, []string{"tr", "a", "b"}},
		{15, []string{"echo", "${#body}"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SplitShell:\n got %+v\nwant %+v", got, want)
	}
	if _, err := SplitShell("tandem up --model 'tiny", 1); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

func TestTandemArgs(t *testing.T) {
	for _, c := range []struct {
		words []string
		args  []string
		ok    bool
	}{
		{[]string{"go", "run", "./cmd/tandem", "up"}, []string{"up"}, true},
		{[]string{"flock", "/tmp/l", "env", "GOMAXPROCS=1", "taskset", "-c", "1", "bin/tandem", "bench"}, []string{"bench"}, true},
		{[]string{"TANDEM_SOAK=1", "go", "test", "./decode"}, nil, false},
		{[]string{"docker", "run", "tandem"}, nil, false},
	} {
		args, ok := TandemArgs(c.words)
		if ok != c.ok || !reflect.DeepEqual(args, c.args) {
			t.Errorf("TandemArgs(%q) = %q, %v; want %q, %v", c.words, args, ok, c.args, c.ok)
		}
	}
}

func TestAnchors(t *testing.T) {
	d := Parse("# Native engine against llama.cpp\n```sh\n# not a heading\n```\n## Router: decision `latency`\n## Router: decision `latency`\n")
	for _, a := range []string{"native-engine-against-llamacpp", "router-decision-latency", "router-decision-latency-1"} {
		if !d.Anchors[a] {
			t.Errorf("no anchor %q in %v", a, d.Anchors)
		}
	}
	if d.Anchors["not-a-heading"] {
		t.Error("a comment in a code block was taken for a heading")
	}
}
