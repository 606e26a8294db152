package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// benchTrace is the window of Mooncake's conversation trace in bench's testdata.
const benchTrace = "../bench/testdata/mooncake-conversation-300.jsonl"

// traceRun is what the test reads of bench's JSON.
type traceRun struct {
	Workload   string   `json:"workload"`
	Scheduled  bool     `json:"scheduled"`
	TraceReuse *float64 `json:"trace_prefix_reuse"`
	TraceCut   int      `json:"trace_cut"`
	Overall    struct {
		Requests     int                `json:"requests"`
		Completed    int                `json:"completed"`
		Failed       int                `json:"failed"`
		InputTokens  int                `json:"input_tokens"`
		OutputTokens int                `json:"output_tokens"`
		CachedTokens int                `json:"cached_tokens"`
		CacheHitRate float64            `json:"cache_hit_rate"`
		ShortOutputs int                `json:"short_outputs"`
		Attainment   map[string]float64 `json:"slo_attainment"`
		Errors       map[string]int     `json:"errors"`
	} `json:"overall"`
}

// A user replays a window of the Mooncake trace against `tandem up` on the sim
// engine: every request completes with exactly the output length the trace
// recorded (scaled), although the sim engine emits EOS now and then; the prompts
// are the trace's lengths; the servers report cache hits, never more than the
// trace's own reuse. Without ignore_eos the same replay falls short, so the
// first half of the test is not vacuous.
func TestBenchTraceReplay(t *testing.T) {
	_, url := startUpWith(t, nil, "--engine", "sim")
	const limit, scale, ctxLen = 40, 0.125, 8192 // the sim engine's context
	wantIn, wantOut, wantCut := expectedTrace(t, limit, scale, ctxLen)

	run := func(args ...string) traceRun {
		t.Helper()
		out := filepath.Join(t.TempDir(), "trace.json")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tandemBin, append([]string{"bench", "--url", url, "--trace", benchTrace,
			"--trace-limit", "40", "--trace-speedup", "20", "--trace-token-scale", "0.125", "--temperature", "0",
			"--slo", "ttft=60000,tpot=60000", "--json", out}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tandem bench: %v\n%s", err, b)
		}
		var f struct {
			Runs []traceRun `json:"runs"`
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &f); err != nil || len(f.Runs) != 1 {
			t.Fatalf("bench JSON: %v, %d runs\n%s", err, len(f.Runs), b)
		}
		return f.Runs[0]
	}

	r := run()
	o := r.Overall
	if !r.Scheduled || o.Requests != limit || o.Completed != limit || o.Failed != 0 {
		t.Fatalf("replay: scheduled %v, %d sent, %d completed, %d failed (%v); want all %d", r.Scheduled, o.Requests, o.Completed, o.Failed, o.Errors, limit)
	}
	if o.InputTokens != wantIn || o.OutputTokens != wantOut || o.ShortOutputs != 0 || r.TraceCut != wantCut {
		t.Errorf("replay: %d prompt and %d output tokens, %d short, %d cut; the trace says %d, %d, 0, %d",
			o.InputTokens, o.OutputTokens, o.ShortOutputs, r.TraceCut, wantIn, wantOut, wantCut)
	}
	if r.TraceReuse == nil || *r.TraceReuse <= 0 || o.CachedTokens <= 0 || o.CacheHitRate > *r.TraceReuse+1e-9 {
		t.Errorf("cache: the servers hit %d tokens (%.4f); the trace's own reuse is %v", o.CachedTokens, o.CacheHitRate, r.TraceReuse)
	}
	if o.Attainment["all"] != 1 {
		t.Errorf("SLO attainment %v with a one-minute SLO; want all met", o.Attainment)
	}

	// Another window (fresh prompts, cold cache), without ignore_eos.
	r = run("--trace-start", "40", "--trace-ignore-eos=false")
	if r.Overall.Completed != limit || r.Overall.ShortOutputs == 0 {
		t.Errorf("without ignore_eos: %d completed, %d short; the sim engine emits EOS 1 token in 256, so some must end early",
			r.Overall.Completed, r.Overall.ShortOutputs)
	}
}

// expectedTrace computes, from the trace file itself, the prompt and output
// tokens a replay of its first n lines at scale sends to a model of ctxLen
// tokens, and how many requests it cuts.
func expectedTrace(t *testing.T, n int, scale float64, ctxLen int) (in, out, cut int) {
	t.Helper()
	f, err := os.Open(benchTrace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	block := int(math.Round(512 * scale))
	for i := 0; i < n && sc.Scan(); i++ {
		var l struct {
			InputLength  int     `json:"input_length"`
			OutputLength int     `json:"output_length"`
			HashIDs      []int64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		k := len(l.HashIDs)
		li := min(max(int(math.Round(float64(l.InputLength)*scale)), (k-1)*block+1), k*block)
		lo := max(1, int(math.Round(float64(l.OutputLength)*scale)))
		if li+lo > ctxLen {
			cut++
			lo = min(lo, ctxLen-1)
			li = ctxLen - lo
		}
		in += li
		out += lo
	}
	return in, out, cut
}
