package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A trace is a request log in the Mooncake format (the FAST'25 release of
// kvcache-ai/Mooncake, and AIPerf's mooncake_trace dataset, whose field names
// these are, so a trace moves between the tools unchanged): one JSON object a
// line,
//
//	{"timestamp": 3000, "input_length": 13544, "output_length": 71, "hash_ids": [0, 219, 220, 221]}
//
// timestamp is the arrival in milliseconds from the start of the trace; the
// prompt is input_length tokens in blocks of a fixed size (512 in Mooncake's
// release), hash_ids naming each block so that equal ids are identical blocks
// (the last may be partial); output_length is the answer's length in tokens.
// No text is published: the prompt is synthesized from the ids.
//
// AIPerf's optional fields are read as AIPerf defines them (its MooncakeTrace
// model and trace-replay docs):
//
//   - text_input is the prompt's text, instead of input_length and hash_ids (AIPerf
//     takes exactly one of the two, and hash_ids only with input_length). It is sent
//     as it is: no --trace-token-scale (text cannot be scaled without a tokenizer),
//     no blocks (so it counts neither in the trace's own reuse nor as a reuse
//     request), and its length is what the server's usage says.
//   - session_id names the conversation a line belongs to. It is kept with the
//     request; the replay does not route by it (AIPerf sends it as a session
//     affinity header, which tandem's router does not read: it routes by the
//     prompt's blocks).
//   - delay is, in AIPerf, the milliseconds a session's next turn waits after the
//     previous turn's answer: a closed loop. This replay is open: every request
//     goes at its timestamp, whatever the answers. A line with a timestamp keeps
//     its delay as read (the timestamp fixes when it goes, as in AIPerf's fixed
//     schedule); a line with a delay and no timestamp is refused, saying so, rather
//     than sent at a time the trace does not give.
//
// messages, payload, tools and extra are still refused by name: they ask for
// things this replay does not do (chat messages, verbatim bodies).

// DefaultTraceBlockSize is the block size of Mooncake's published traces.
const DefaultTraceBlockSize = 512

// maxTimestamp bounds arrivals (a year in milliseconds), so that scaled times
// stay far inside a time.Duration.
const maxTimestamp = 366 * 24 * 3600 * 1000

// TraceRecord is one request of a trace.
type TraceRecord struct {
	// Line is the record's line in its file, counted from 1.
	Line int
	// Timestamp is the arrival in milliseconds from the start of the trace.
	Timestamp int64
	// InputLength and HashIDs are the synthesized prompt's; 0 and nil when
	// TextInput is the prompt.
	InputLength  int
	OutputLength int
	HashIDs      []int64
	// TextInput is the prompt's text, when the trace gives it.
	TextInput string
	// SessionID is the conversation the request belongs to, when given.
	SessionID string
	// DelayMS is AIPerf's delay as read (see above): not applied, the
	// timestamp rules.
	DelayMS float64
}

// traceFields are the fields a line may have. AIPerf's other mooncake_trace
// fields (messages, payload, tools, extra, ...) are refused by name rather
// than ignored: a trace that carries them means something this replay does
// not do.
var traceFields = []string{"timestamp", "input_length", "output_length", "hash_ids", "text_input", "session_id", "delay"}

// ParseTrace reads a trace whose blocks are blockSize tokens. It is strict:
// timestamp, output_length and a prompt (input_length with hash_ids, or
// text_input) are required, lengths are positive integers, hash_ids holds
// exactly the blocks input_length needs, timestamps never go back, and a field
// not listed in traceFields is an error; each error names the line and the field.
func ParseTrace(r io.Reader, blockSize int) ([]TraceRecord, error) {
	if blockSize < 1 {
		return nil, fmt.Errorf("bench: trace block size %d must be positive", blockSize)
	}
	var recs []TraceRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	last := int64(0)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		rec, err := parseTraceLine(line, blockSize)
		if err != nil {
			return nil, fmt.Errorf("bench: trace line %d: %w", n, err)
		}
		if len(recs) > 0 && rec.Timestamp < last {
			return nil, fmt.Errorf("bench: trace line %d: field timestamp: %d ms is before the previous line's %d ms; a trace must be in arrival order",
				n, rec.Timestamp, last)
		}
		rec.Line, last = n, rec.Timestamp
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: trace: %w", err)
	}
	if len(recs) == 0 {
		return nil, errors.New("bench: the trace holds no requests")
	}
	return recs, nil
}

// parseTraceLine decodes the line once, into its fields as raw JSON, then reads
// each field from there: the field names are checked, and each error names its
// field, without a second pass over the line.
func parseTraceLine(line []byte, blockSize int) (TraceRecord, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return TraceRecord{}, fmt.Errorf("not a JSON object: %v", err)
	}
	for k := range raw {
		if !slices.Contains(traceFields, k) {
			return TraceRecord{}, fmt.Errorf("field %s: not a Mooncake trace field (want %s)", k, strings.Join(traceFields, ", "))
		}
	}
	var rec TraceRecord
	var err error
	if d, ok := present(raw, "delay"); ok {
		if err := json.Unmarshal(d, &rec.DelayMS); err != nil || rec.DelayMS < 0 || math.IsInf(rec.DelayMS, 0) {
			return rec, fmt.Errorf("field delay: %.40s is not a non-negative number of milliseconds", d)
		}
		if _, ok := present(raw, "timestamp"); !ok {
			return rec, errors.New("field delay: without a timestamp, a turn goes a delay after its session's previous answer " +
				"(AIPerf's closed-loop sessions); this replay sends each request at its timestamp, so give one")
		}
	}
	if s, ok := present(raw, "session_id"); ok {
		if err := json.Unmarshal(s, &rec.SessionID); err != nil {
			return rec, fmt.Errorf("field session_id: %.40s is not a string", s)
		}
	}
	if rec.Timestamp, err = traceInt(raw["timestamp"], "timestamp", 0); err != nil {
		return rec, err
	}
	if rec.Timestamp > maxTimestamp {
		return rec, fmt.Errorf("field timestamp: %d ms is over a year; timestamps are milliseconds from the start of the trace", rec.Timestamp)
	}
	if t, ok := present(raw, "text_input"); ok {
		return textRecord(rec, raw, t)
	}
	in, err := traceInt(raw["input_length"], "input_length", 1)
	if err != nil {
		return rec, err
	}
	out, err := traceInt(raw["output_length"], "output_length", 1)
	if err != nil {
		return rec, err
	}
	if in > math.MaxInt32 || out > math.MaxInt32 {
		return rec, fmt.Errorf("field input_length or output_length: %d tokens is beyond any model", max(in, out))
	}
	rec.InputLength, rec.OutputLength = int(in), int(out)
	ids := raw["hash_ids"]
	if len(ids) == 0 || string(ids) == "null" {
		return rec, errors.New("field hash_ids: missing")
	}
	if err := json.Unmarshal(ids, &rec.HashIDs); err != nil {
		return rec, fmt.Errorf("field hash_ids: %.40s is not a list of integers", ids)
	}
	if want := (rec.InputLength-1)/blockSize + 1; len(rec.HashIDs) != want {
		return rec, fmt.Errorf("field hash_ids: %d ids, but input_length %d needs %d blocks of %d tokens (is --trace-block-size right?)",
			len(rec.HashIDs), rec.InputLength, want, blockSize)
	}
	for i, h := range rec.HashIDs {
		if h < 0 {
			return rec, fmt.Errorf("field hash_ids: id %d at index %d is negative", h, i)
		}
	}
	return rec, nil
}

// present returns a field that is there and not null.
func present(raw map[string]json.RawMessage, field string) (json.RawMessage, bool) {
	v, ok := raw[field]
	return v, ok && len(v) > 0 && string(v) != "null"
}

// textRecord finishes a line whose prompt is text_input: AIPerf's rules (no
// input_length, no hash_ids beside it), a non-empty string, and output_length.
func textRecord(rec TraceRecord, raw map[string]json.RawMessage, text json.RawMessage) (TraceRecord, error) {
	for _, f := range []string{"input_length", "hash_ids"} {
		if _, ok := present(raw, f); ok {
			return rec, fmt.Errorf("field %s: beside text_input; a line's prompt is text_input or input_length with hash_ids, not both", f)
		}
	}
	if err := json.Unmarshal(text, &rec.TextInput); err != nil {
		return rec, fmt.Errorf("field text_input: %.40s is not a string", text)
	}
	if rec.TextInput == "" {
		return rec, errors.New("field text_input: empty")
	}
	out, err := traceInt(raw["output_length"], "output_length", 1)
	if err != nil {
		return rec, err
	}
	if out > math.MaxInt32 {
		return rec, fmt.Errorf("field output_length: %d tokens is beyond any model", out)
	}
	rec.OutputLength = int(out)
	return rec, nil
}

// traceInt reads a required integer field of at least lo.
func traceInt(raw json.RawMessage, field string, lo int64) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fmt.Errorf("field %s: missing", field)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %s: %.40s is not an integer", field, raw)
	}
	if v < lo {
		return 0, fmt.Errorf("field %s: %d must be at least %d", field, v, lo)
	}
	return v, nil
}

// TraceWindow shapes what of a trace is replayed, and how.
type TraceWindow struct {
	// Start is the index of the first record to replay; Limit caps how many (0:
	// to the end).
	Start, Limit int
	// Speedup divides the gaps between arrivals: 2 replays the trace in half its
	// time.
	Speedup float64
	// TokenScale multiplies the block size and every length, so a CPU engine can
	// replay a trace of long prompts; the blocks, and so the sharing between
	// prompts, stay as they were.
	TokenScale float64
	// BlockSize is the trace's block size, before scaling.
	BlockSize int
	// KVBlockSize is the servers' KV block size, for BlockWarning; 0: unknown,
	// nothing checked.
	KVBlockSize int
}

// Validate checks the window's numbers.
func (w TraceWindow) Validate() error {
	var errs []error
	if w.Start < 0 || w.Limit < 0 {
		errs = append(errs, errors.New("bench: --trace-start and --trace-limit must not be negative"))
	}
	if !(w.Speedup >= 0.01) || math.IsInf(w.Speedup, 0) {
		errs = append(errs, fmt.Errorf("bench: --trace-speedup %g must be a number of at least 0.01", w.Speedup))
	}
	if !(w.TokenScale > 0 && w.TokenScale <= 1) {
		errs = append(errs, fmt.Errorf("bench: --trace-token-scale %g must be in (0, 1]", w.TokenScale))
	}
	if w.KVBlockSize < 0 {
		errs = append(errs, fmt.Errorf("bench: --trace-kv-block-size %d must not be negative", w.KVBlockSize))
	}
	if w.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("bench: --trace-block-size %d must be positive", w.BlockSize))
	} else if w.ScaledBlockSize() < 1 {
		errs = append(errs, fmt.Errorf("bench: --trace-token-scale %g shrinks the %d-token blocks to nothing", w.TokenScale, w.BlockSize))
	}
	return errors.Join(errs...)
}

// ScaledBlockSize is the block size the prompts are built with.
func (w TraceWindow) ScaledBlockSize() int {
	return int(math.Round(float64(w.BlockSize) * w.TokenScale))
}

// BlockWarning says, when it is so, that the scaled trace block is not a whole
// number of the servers' KV blocks. A prefix two prompts share then ends inside
// a KV block, and a server caches only whole blocks: the tail of each shared
// prefix, up to a KV block less a token, is reuse the trace offers that no
// server's cache can hold, so the hit rate reads low against the trace's own.
func (w TraceWindow) BlockWarning() string {
	b := w.ScaledBlockSize()
	if w.KVBlockSize <= 0 || b < 1 || b%w.KVBlockSize == 0 {
		return ""
	}
	why := fmt.Sprintf("--trace-block-size %d", w.BlockSize)
	if w.TokenScale != 1 {
		why = fmt.Sprintf("--trace-token-scale %g makes the %d-token trace blocks %d tokens", w.TokenScale, w.BlockSize, b)
	}
	return fmt.Sprintf("%s, not a multiple of the servers' %d-token KV blocks (--trace-kv-block-size): a shared prefix ends "+
		"inside a KV block, so up to %d tokens of each are reuse the servers' caches cannot hold, and their hit rate reads "+
		"below the trace's own (a multiple: --trace-token-scale %g)", why, w.KVBlockSize, w.KVBlockSize-1, w.nearScale())
}

// nearScale is the token scale nearest TokenScale that makes the scaled block a
// whole number of KV blocks (at least one).
func (w TraceWindow) nearScale() float64 {
	k := max(1, math.Round(float64(w.BlockSize)*w.TokenScale/float64(w.KVBlockSize)))
	return k * float64(w.KVBlockSize) / float64(w.BlockSize)
}

// TraceRequest is one request to replay: when, and how long its prompt and
// answer are, in the scaled tokens.
type TraceRequest struct {
	// Line is the record's line in the trace file.
	Line int
	// At is the arrival, from the first arrival of the window.
	At           time.Duration
	InputLength  int // 0 for a text prompt
	OutputLength int
	HashIDs      []int64
	// Text is the prompt when the trace gave it (text_input), sent unscaled.
	Text      string
	SessionID string
}

// Apply cuts the window out of recs and scales it. Each prompt keeps its
// number of blocks: its scaled length is rounded into the range those blocks
// cover, so two prompts share exactly the blocks they shared before.
func (w TraceWindow) Apply(recs []TraceRecord) ([]TraceRequest, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if w.Start >= len(recs) {
		return nil, fmt.Errorf("bench: --trace-start %d is past the trace's %d requests", w.Start, len(recs))
	}
	recs = recs[w.Start:]
	if w.Limit > 0 && w.Limit < len(recs) {
		recs = recs[:w.Limit]
	}
	b := w.ScaledBlockSize()
	t0 := recs[0].Timestamp
	out := make([]TraceRequest, len(recs))
	for i, r := range recs {
		n := len(r.HashIDs)
		in := int(math.Round(float64(r.InputLength) * w.TokenScale))
		in = min(max(in, (n-1)*b+1), n*b)
		ms := float64(r.Timestamp-t0) / w.Speedup
		if r.TextInput != "" {
			in = 0
		}
		out[i] = TraceRequest{
			Line: r.Line, At: time.Duration(ms * float64(time.Millisecond)),
			InputLength: in, OutputLength: max(1, int(math.Round(float64(r.OutputLength)*w.TokenScale))),
			HashIDs: r.HashIDs, Text: r.TextInput, SessionID: r.SessionID,
		}
	}
	return out, nil
}

// PrefixReuse is the share of prompt tokens an unbounded prefix cache shared by
// every server would have held: for each request, its leading blocks whose ids
// an earlier request of the window had. It is what the trace offers, the
// ceiling of the hit rate the servers report.
func PrefixReuse(reqs []TraceRequest, blockSize int) float64 {
	seen := map[int64]bool{}
	var hit, total int
	for _, r := range reqs {
		lead := 0
		for lead < len(r.HashIDs) && seen[r.HashIDs[lead]] {
			lead++
		}
		hit += min(lead*blockSize, r.InputLength)
		total += r.InputLength
		for _, h := range r.HashIDs {
			seen[h] = true
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}
