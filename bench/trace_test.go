package bench

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// testTrace is a window of Mooncake's conversation trace (see testdata/NOTICE).
const testTrace = "testdata/mooncake-conversation-300.jsonl"

func readTestTrace(t testing.TB) []TraceRecord {
	t.Helper()
	f, err := os.Open(testTrace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ParseTrace(f, DefaultTraceBlockSize)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestParseTraceReadsMooncake(t *testing.T) {
	recs := readTestTrace(t)
	if len(recs) != 300 {
		t.Fatalf("%d records, want 300", len(recs))
	}
	first := recs[0]
	if first.Line != 1 || first.Timestamp != 0 || first.InputLength != 6758 || first.OutputLength != 500 || len(first.HashIDs) != 14 {
		t.Errorf("first record = %+v", first)
	}
	if last := recs[299]; last.Line != 300 || last.Timestamp != 102000 || last.InputLength != 979 || last.OutputLength != 140 {
		t.Errorf("last record = %+v", last)
	}
}

func TestParseTraceErrorsNameLineAndField(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`
	for _, c := range []struct {
		name, text, want string
	}{
		{"empty", "\n\n", "no requests"},
		{"not json", good + "\n{oops", "line 2: not a JSON object"},
		{"not an object", "[1,2]", "line 1: not a JSON object"},
		{"unknown field", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "messages": []}`,
			"line 1: field messages: not a Mooncake trace field"},
		{"text beside length", `{"timestamp": 0, "input_length": 600, "output_length": 5, "text_input": "hi"}`,
			"line 1: field input_length: beside text_input"},
		{"text beside ids", `{"timestamp": 0, "output_length": 5, "hash_ids": [1], "text_input": "hi"}`,
			"line 1: field hash_ids: beside text_input"},
		{"empty text", `{"timestamp": 0, "output_length": 5, "text_input": ""}`, "line 1: field text_input: empty"},
		{"text not a string", `{"timestamp": 0, "output_length": 5, "text_input": 5}`, "line 1: field text_input: 5 is not a string"},
		{"text without output", `{"timestamp": 0, "text_input": "hi"}`, "line 1: field output_length: missing"},
		{"session not a string", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "session_id": 7}`,
			"line 1: field session_id: 7 is not a string"},
		{"negative delay", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "delay": -1}`,
			"line 1: field delay: -1 is not a non-negative number"},
		{"delay without timestamp", `{"session_id": "s", "delay": 2000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`,
			"line 1: field delay: without a timestamp, a turn goes a delay after its session's previous answer"},
		{"missing timestamp", `{"input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`, "line 1: field timestamp: missing"},
		{"missing input", `{"timestamp": 0, "output_length": 5, "hash_ids": [1, 2]}`, "line 1: field input_length: missing"},
		{"missing output", `{"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}`, "line 1: field output_length: missing"},
		{"missing hash ids", `{"timestamp": 0, "input_length": 600, "output_length": 5}`, "line 1: field hash_ids: missing"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`,
			"line 1: field timestamp: -1 must be at least 0"},
		{"fractional length", `{"timestamp": 0, "input_length": 600.5, "output_length": 5, "hash_ids": [1, 2]}`,
			"line 1: field input_length: 600.5 is not an integer"},
		{"string length", `{"timestamp": 0, "input_length": "600", "output_length": 5, "hash_ids": [1, 2]}`,
			"line 1: field input_length"},
		{"zero output", `{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [1, 2]}`,
			"line 1: field output_length: 0 must be at least 1"},
		{"zero input", `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`,
			"line 1: field input_length: 0 must be at least 1"},
		{"too few ids", `{"timestamp": 0, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2]}`,
			"line 1: field hash_ids: 2 ids, but input_length 1025 needs 3 blocks of 512"},
		{"too many ids", `{"timestamp": 0, "input_length": 512, "output_length": 5, "hash_ids": [1, 2]}`,
			"line 1: field hash_ids: 2 ids, but input_length 512 needs 1 blocks"},
		{"negative id", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, -2]}`,
			"line 1: field hash_ids: id -2 at index 1 is negative"},
		{"ids not ints", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": ["a", "b"]}`,
			"line 1: field hash_ids"},
		{"out of order", good + "\n\n" + strings.Replace(good, `"timestamp": 0`, `"timestamp": 5`, 1) + "\n" + good,
			"line 4: field timestamp: 0 ms is before the previous line's 5 ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(c.text), DefaultTraceBlockSize)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// Blank lines are skipped but counted, so the line named is the file's.
	recs, err := ParseTrace(strings.NewReader("\n"+good+"\n"), DefaultTraceBlockSize)
	if err != nil || len(recs) != 1 || recs[0].Line != 2 {
		t.Errorf("ParseTrace = %+v, %v; want one record on line 2", recs, err)
	}
}

// AIPerf's optional fields are read: text_input as the prompt (unscaled, no
// blocks), session_id kept, delay read beside the timestamp that rules.
func TestParseTraceReadsAIPerfFields(t *testing.T) {
	text := `{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2], "session_id": "s1"}
{"timestamp": 2500, "text_input": "Tell me more.", "output_length": 8, "session_id": "s1", "delay": 2000}
{"timestamp": 2600, "input_length": 700, "output_length": 4, "hash_ids": [1, 3], "session_id": null, "delay": 0.5}`
	recs, err := ParseTrace(strings.NewReader(text), DefaultTraceBlockSize)
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[0]; r.SessionID != "s1" || r.TextInput != "" || r.InputLength != 600 {
		t.Errorf("line 1: %+v", r)
	}
	if r := recs[1]; r.SessionID != "s1" || r.TextInput != "Tell me more." || r.InputLength != 0 || r.HashIDs != nil ||
		r.DelayMS != 2000 || r.Timestamp != 2500 || r.OutputLength != 8 {
		t.Errorf("line 2: %+v", r)
	}
	if r := recs[2]; r.SessionID != "" || r.DelayMS != 0.5 {
		t.Errorf("line 3: %+v", r)
	}
	reqs, err := TraceWindow{Speedup: 1, TokenScale: 0.5, BlockSize: DefaultTraceBlockSize}.Apply(recs)
	if err != nil {
		t.Fatal(err)
	}
	if r := reqs[1]; r.Text != "Tell me more." || r.InputLength != 0 || r.OutputLength != 4 || r.At != 2500*time.Millisecond || r.SessionID != "s1" {
		t.Errorf("scaled text request: %+v", r)
	}
	// The text prompt has no blocks: the reuse is the third request's first block.
	if got, want := PrefixReuse(reqs, 256), 256.0/(300+350); got != want {
		t.Errorf("reuse %v, want %v", got, want)
	}
	tr, err := NewTraceReplay("t", reqs, 256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tr.classes, []string{ClassFresh, ClassFresh, ClassReuse}) {
		t.Errorf("classes %v", tr.classes)
	}
	tr.synth, tr.next = &Synth{}, 1
	req, err := tr.Next(nil)
	if err != nil || req.Prompt != "Tell me more." || req.PromptIDs != nil || req.MaxTokens != 4 || req.Class != ClassFresh {
		t.Errorf("Next = %+v, %v", req, err)
	}
}

func TestTraceWindowScalesAndKeepsBlocks(t *testing.T) {
	recs := readTestTrace(t)
	w := TraceWindow{Start: 10, Limit: 50, Speedup: 4, TokenScale: 1.0 / 16, BlockSize: 512}
	reqs, err := w.Apply(recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 50 || reqs[0].Line != 11 || reqs[0].At != 0 {
		t.Fatalf("window: %d requests, first line %d at %v; want 50 from line 11 at 0", len(reqs), reqs[0].Line, reqs[0].At)
	}
	b := w.ScaledBlockSize()
	if b != 32 {
		t.Fatalf("scaled block size %d, want 32", b)
	}
	for i, r := range reqs {
		rec := recs[10+i]
		wantAt := time.Duration(rec.Timestamp-recs[10].Timestamp) * time.Millisecond / 4
		if r.At != wantAt {
			t.Errorf("line %d: at %v, want %v", r.Line, r.At, wantAt)
		}
		// The same blocks, each scaled, the last one partial as before.
		if n := len(r.HashIDs); r.InputLength <= (n-1)*b || r.InputLength > n*b {
			t.Errorf("line %d: %d tokens do not fill its %d blocks of %d", r.Line, r.InputLength, n, b)
		}
		if r.OutputLength < 1 || r.OutputLength > rec.OutputLength/16+1 {
			t.Errorf("line %d: output %d from %d at 1/16", r.Line, r.OutputLength, rec.OutputLength)
		}
	}
	if _, err := (TraceWindow{Start: 300, Speedup: 1, TokenScale: 1, BlockSize: 512}).Apply(recs); err == nil {
		t.Error("a window past the end was accepted")
	}
	for _, bad := range []TraceWindow{
		{Speedup: 0, TokenScale: 1, BlockSize: 512},
		{Speedup: 1, TokenScale: 0, BlockSize: 512},
		{Speedup: 1, TokenScale: 2, BlockSize: 512},
		{Speedup: 1, TokenScale: 0.0001, BlockSize: 512},
		{Speedup: 1, TokenScale: 1, BlockSize: 512, Start: -1},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestPrefixReuseCountsLeadingSeenBlocks(t *testing.T) {
	reqs := []TraceRequest{
		{InputLength: 20, HashIDs: []int64{1, 2, 3}},  // cold
		{InputLength: 18, HashIDs: []int64{1, 2, 4}},  // 2 blocks of 8 hit
		{InputLength: 8, HashIDs: []int64{5}},         // cold
		{InputLength: 24, HashIDs: []int64{9, 2, 3}},  // 2 seen, but not leading: no hit
		{InputLength: 4, HashIDs: []int64{1}},         // a partial block of a seen one: 4 tokens
		{InputLength: 17, HashIDs: []int64{1, 2, 3}},  // all 17
		{InputLength: 24, HashIDs: []int64{1, 10, 3}}, // 1 block
	}
	hit := 0 + 16 + 0 + 0 + 4 + 17 + 8
	total := 20 + 18 + 8 + 24 + 4 + 17 + 24
	if got, want := PrefixReuse(reqs, 8), float64(hit)/float64(total); got != want {
		t.Errorf("PrefixReuse = %v, want %v", got, want)
	}
}

// FuzzParseTrace checks that no input crashes the parser, and that what it
// accepts keeps its promises.
func FuzzParseTrace(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`, 512)
	f.Add(`{"timestamp": 0, "input_length": 6, "output_length": 5, "hash_ids": [1, 2]}`+"\n"+
		`{"timestamp": 7, "input_length": 3, "output_length": 1, "hash_ids": [1]}`, 4)
	f.Add(`{"timestamp": 1e3, "input_length": 1, "output_length": 1, "hash_ids": [0]}`, 1)
	f.Add(`{"timestamp": 0, "input_length": 9223372036854775807, "output_length": 1, "hash_ids": null}`, 512)
	f.Add("{\"timestamp\": 0}\n[", 0)
	f.Add(`{"timestamp": 5, "text_input": "hi", "output_length": 3, "session_id": "a", "delay": 1.5}`, 16)
	b, err := os.ReadFile(testTrace)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b[:2000]), 512)
	f.Fuzz(func(t *testing.T, text string, blockSize int) {
		recs, err := ParseTrace(strings.NewReader(text), blockSize)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "bench: ") || !strings.Contains(err.Error(), "trace") {
				t.Errorf("error %q does not say it is the trace's", err)
			}
			return
		}
		last := int64(0)
		for _, r := range recs {
			n := len(r.HashIDs)
			if r.Timestamp < last || r.OutputLength < 1 || r.DelayMS < 0 {
				t.Fatalf("accepted a bad record %+v", r)
			}
			last = r.Timestamp
			if r.TextInput != "" {
				if n != 0 || r.InputLength != 0 {
					t.Fatalf("accepted a text record with blocks %+v", r)
				}
				continue
			}
			if r.InputLength < 1 || n == 0 || r.InputLength <= (n-1)*blockSize || r.InputLength > n*blockSize {
				t.Fatalf("accepted a bad record %+v (block size %d)", r, blockSize)
			}
		}
		w := TraceWindow{Speedup: 3, TokenScale: 0.5, BlockSize: blockSize}
		if w.Validate() != nil {
			return
		}
		reqs, err := w.Apply(recs)
		if err != nil {
			t.Fatal(err)
		}
		b := w.ScaledBlockSize()
		for _, r := range reqs {
			if r.Text != "" {
				continue
			}
			if n := len(r.HashIDs); r.InputLength <= (n-1)*b || r.InputLength > n*b || r.OutputLength < 1 || r.At < 0 {
				t.Fatalf("scaled a record to %+v (block size %d)", r, b)
			}
		}
	})
}

// A scaled trace block that is not a whole number of KV blocks is warned of,
// naming the scale that would be, and a whole one is not.
func TestTraceBlockWarning(t *testing.T) {
	for _, c := range []struct {
		block, kv int
		scale     float64
		want      []string
	}{
		{512, 16, 1, nil},
		{512, 16, 0.0625, nil},
		{512, 0, 0.05, nil},
		{512, 16, 0.05, []string{"--trace-token-scale 0.05 makes the 512-token trace blocks 26 tokens",
			"servers' 16-token KV blocks", "up to 15 tokens", "--trace-token-scale 0.0625"}},
		{100, 16, 1, []string{"--trace-block-size 100, not a multiple", "--trace-token-scale 0.96"}},
		{512, 64, 0.01, []string{"5 tokens", "--trace-token-scale 0.125"}},
	} {
		w := TraceWindow{BlockSize: c.block, KVBlockSize: c.kv, TokenScale: c.scale, Speedup: 1}
		got := w.BlockWarning()
		if (got == "") != (c.want == nil) {
			t.Errorf("%+v: warning %q", w, got)
		}
		for _, s := range c.want {
			if !strings.Contains(got, s) {
				t.Errorf("%+v: warning %q lacks %q", w, got, s)
			}
		}
	}
}

// The warning reaches stderr (the plan's) and each report, in its JSON and its
// text.
func TestTraceBlockWarningReachesTheReport(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"--url", "http://127.0.0.1:1", "--trace", testTrace, "--trace-token-scale", "0.05"}); err != nil {
		t.Fatal(err)
	}
	p, err := o.Plan(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "26 tokens") {
		t.Fatalf("plan warnings %q", p.Warnings)
	}
	wl, err := p.NewLoad()
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	wl.(ReportNoter).NoteReport(&rep)
	var text strings.Builder
	rep.writeNotes(&text)
	if len(rep.Warnings) != 1 || !strings.Contains(text.String(), "warning: --trace-token-scale 0.05") {
		t.Errorf("report warnings %q, text:\n%s", rep.Warnings, text.String())
	}
	b, _ := json.Marshal(&rep)
	if !strings.Contains(string(b), `"warnings":["--trace-token-scale 0.05`) {
		t.Errorf("JSON %s", b)
	}
}
