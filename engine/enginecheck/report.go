package enginecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is one check's outcome.
type Status string

const (
	// OK: tandem will use it as it is.
	OK Status = "ok"
	// Warn: serving works, with less than tandem could do (text mode, no load
	// metrics, no events seen, no transfer parameters on an engine that is not
	// meant for prefill).
	Warn Status = "warn"
	// Fail: a worker in front of this engine would not serve, or would serve
	// wrongly (no model, unknown context, another block size).
	Fail Status = "FAIL"
	// Skip: not probed (not configured, or not applicable to this engine).
	Skip Status = "skip"
)

// Item is one line of the report.
type Item struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	// Found is what the engine showed, Detail what it means for tandem.
	Found  string `json:"found"`
	Detail string `json:"detail,omitempty"`
}

// Report is what a check found. Its fields are for tools (--json); Items are
// the human's table.
type Report struct {
	Engine string `json:"engine"`
	URL    string `json:"url"`
	// Models are the served ids; Model is the one tandem would use.
	Models        []string `json:"models"`
	Model         string   `json:"model"`
	ContextLength int      `json:"context_length"`
	TokenMode     string   `json:"token_mode"`
	// TransferParams are what the prefill leg returned, verbatim.
	TransferParams json.RawMessage `json:"transfer_params,omitempty"`
	Health         string          `json:"health"`
	// Metrics maps each load figure to the series found for it ("" missing).
	Metrics map[string]string `json:"metrics"`
	// KVEvents is what the event sockets showed; nil without an endpoint.
	KVEvents *EventsSeen `json:"kv_events,omitempty"`
	Items    []Item      `json:"items"`
	// OK is false when any item failed: the command exits non-zero.
	OK bool `json:"ok"`
}

// EventsSeen is what the publisher sent within the window, and the replay
// socket's answer.
type EventsSeen struct {
	Live     int `json:"live_batches"`
	Replayed int `json:"replayed_batches"`
	// Encodings are "array" and/or "map" (msgspec's array_like or tagged maps).
	Encodings []string `json:"encodings"`
	// BlockSizes are those BlockStored events carried.
	BlockSizes    []int `json:"block_sizes"`
	ReplayAnswers bool  `json:"replay_answers"`
	// ReplayWithTopic counts replayed batches that came with a topic frame.
	ReplayWithTopic int    `json:"replay_with_topic"`
	Bad             int    `json:"bad_messages"`
	ReplayError     string `json:"replay_error,omitempty"`
}

func (r *Report) add(check string, st Status, found, detail string) {
	r.Items = append(r.Items, Item{Check: check, Status: st, Found: found, Detail: detail})
	if st == Fail {
		r.OK = false
	}
}

// Failed lists the checks that failed, for the command's error.
func (r *Report) Failed() []string {
	var out []string
	for _, it := range r.Items {
		if it.Status == Fail {
			out = append(out, it.Check)
		}
	}
	return out
}

// WriteTable writes the report as a table a person reads.
func (r *Report) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "%s at %s\n\n", r.Engine, r.URL); err != nil {
		return err
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tFOUND\tDETAIL")
	for _, it := range r.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Check, it.Status, clip(oneLine(it.Found)), oneLine(it.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		// A row without detail would end in the padding of its last column.
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	verdict := "OK: a tandem worker can serve with this engine"
	if !r.OK {
		verdict = "FAILED: " + strings.Join(r.Failed(), ", ")
	}
	_, err := fmt.Fprintf(w, "\n%s\n", verdict)
	return err
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// clip keeps a table's column readable; --json has the whole value.
func clip(s string) string {
	if r := []rune(s); len(r) > 64 {
		return string(r[:63]) + "…"
	}
	return s
}
