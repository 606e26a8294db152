package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceSource is one window of a concatenated replay: a trace file and the
// part of it to replay (Limit 0: to the end).
type TraceSource struct {
	File         string
	Start, Limit int
}

// ParseTraceSources reads --trace: one file, or windows of several traces
// replayed one after the other, FILE[@START+LIMIT] comma-separated
// ("conv.jsonl@0+600,tool.jsonl@100+600"). A window without @ takes
// --trace-start and --trace-limit.
func ParseTraceSources(spec string) ([]TraceSource, error) {
	var out []TraceSource
	for i, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		file, win, windowed := strings.Cut(part, "@")
		if file == "" {
			return nil, fmt.Errorf("bench: --trace: window %d names no file", i+1)
		}
		s := TraceSource{File: file, Start: -1}
		if windowed {
			start, limit, ok := strings.Cut(win, "+")
			var err1, err2 error
			s.Start, err1 = strconv.Atoi(start)
			s.Limit, err2 = strconv.Atoi(limit)
			if !ok || err1 != nil || err2 != nil || s.Start < 0 || s.Limit < 1 {
				return nil, fmt.Errorf("bench: --trace %q: want FILE@START+LIMIT, a first request (0-based) and a positive count, e.g. conv.jsonl@0+600", part)
			}
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("bench: --trace names no file")
	}
	return out, nil
}

// ConcatWindows replays windows one after the other: each starts one mean
// gap of the window before it after that window's last arrival, and the
// block ids of each are moved past those of the windows before, so that
// windows of different traces share no block by accident of numbering.
func ConcatWindows(windows [][]TraceRequest) []TraceRequest {
	var (
		out      []TraceRequest
		offset   time.Duration
		idOffset int64
	)
	for _, w := range windows {
		if len(w) == 0 {
			continue
		}
		var maxID int64 = -1
		for _, r := range w {
			c := r
			c.At += offset
			if len(r.HashIDs) > 0 {
				c.HashIDs = make([]int64, len(r.HashIDs))
				for j, h := range r.HashIDs {
					c.HashIDs[j] = h + idOffset
				}
				maxID = max(maxID, slices.Max(r.HashIDs))
			}
			out = append(out, c)
		}
		last := w[len(w)-1].At
		gap := time.Duration(0)
		if len(w) > 1 {
			gap = last / time.Duration(len(w)-1)
		}
		offset += last + gap
		idOffset += maxID + 1
	}
	return out
}
