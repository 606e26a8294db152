package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// BoundRow is the demand at one speedup, in device-seconds per second of trace.
type BoundRow struct {
	Speedup, Rate             float64
	Prefill, Decode, Total    float64
	Utilisation               float64
	Shared, SharedUtilisation float64
}

// Rows prices d at each speedup on devices devices.
func (d Demand) Rows(speedups []float64, devices int) []BoundRow {
	var rows []BoundRow
	for _, x := range speedups {
		per := x / d.SpanMS // demand in ms per ms of trace
		r := BoundRow{Speedup: x, Rate: d.Rate(x), Prefill: d.PrefillMS * per, Decode: d.DecodeMS * per,
			Total: d.TotalMS() * per, Shared: d.SharedMS() * per}
		r.Utilisation, r.SharedUtilisation = r.Total/float64(devices), r.Shared/float64(devices)
		rows = append(rows, r)
	}
	return rows
}

// Rate is the window's arrival rate at speedup x, in requests per second.
func (d Demand) Rate(x float64) float64 { return float64(d.Requests) * x / (d.SpanMS / 1e3) }

// Crossing is the speedup at which the demand fills devices at utilisation
// util. Demand grows in proportion to the speedup, so this is exact, not only
// interpolated between the rows; shared reads the demand with fixed costs paid
// once.
func (d Demand) Crossing(devices int, util float64, shared bool) float64 {
	ms := d.TotalMS()
	if shared {
		ms = d.SharedMS()
	}
	return float64(devices) * util * d.SpanMS / ms
}

// WindowSpeedup is the speedup up to which the window's whole work, on devices
// devices, is done by its last arrival plus ttftMS: the backlog a window as
// short as this one can end with and still have its last prompts answered in
// time. A guide to why a short replay can read above the steady-state bound,
// not a bound: the last answers' decode may run later, and a tenth of the
// requests may fail. +Inf when the work fits in ttftMS alone.
func (d Demand) WindowSpeedup(devices int, ttftMS float64) float64 {
	busy := d.TotalMS() / float64(devices)
	if busy <= ttftMS {
		return math.Inf(1)
	}
	return d.SpanMS / (busy - ttftMS)
}

// BoundOutput is how WriteBound writes a table and what it adds below it.
type BoundOutput struct {
	// MaxUtil, below 1, adds the load at which the demand reaches that share.
	MaxUtil float64
	// TTFTMS > 0 adds the load up to which a short run's backlog is answered in
	// time (WindowSpeedup for a trace; MixWindowRate for a mix, over WindowMS).
	TTFTMS, WindowMS float64
	Markdown         bool
}

// WriteBound writes the table of one cache mode and what it says: the load
// at which the demand fills the devices, at utilisation 1 and at MaxUtil. A
// trace's loads are speedups; a mix's (MixDemand) are rates, in requests/s.
func WriteBound(w io.Writer, d Demand, cfg BoundConfig, loads []float64, o BoundOutput) error {
	mix := d.Mix != ""
	rows := d.Rows(loads, cfg.Devices)
	credited := 0.0
	if d.PromptTokens > 0 {
		credited = float64(d.CachedTokens) / float64(d.PromptTokens)
	}
	device := fmt.Sprintf("sim profile %s (%d tokens a step at most), %d devices, TBT %g ms; work in device-seconds per second",
		cfg.Config.Profile.Name, cfg.Config.Profile.MaxBatchedTokens, cfg.Devices, cfg.TBTMS)
	if mix {
		fmt.Fprintf(w, "mix %s: %.2f ms of device time a request (prefill %.2f, decode %.2f), no prompt blocks shared; %s\n",
			d.Mix, d.TotalMS()/float64(d.Requests), d.PrefillMS/float64(d.Requests), d.DecodeMS/float64(d.Requests), device)
	} else {
		fmt.Fprintf(w, "prefix cache %s: %.1f %% of prompt tokens credited; %d requests over %.1f s at speedup 1 (%.2f requests/s); %s of trace\n",
			cfg.Cache, 100*credited, d.Requests, d.SpanMS/1e3, d.Rate(1), device)
	}
	if d.OverTBT > 0 {
		fmt.Fprintf(w, "%d requests decode slower than TBT %g ms even alone; priced at a batch of one\n", d.OverTBT, cfg.TBTMS)
	}
	head := []string{"speedup", "requests/s", "prefill", "decode", "total", "utilisation", "total, shared", "utilisation, shared"}
	cells := func(r BoundRow) []string {
		return []string{fmt.Sprintf("%g", r.Speedup), fmt.Sprintf("%.2f", r.Rate), fmt.Sprintf("%.2f", r.Prefill), fmt.Sprintf("%.2f", r.Decode),
			fmt.Sprintf("%.2f", r.Total), fmt.Sprintf("%.2f", r.Utilisation), fmt.Sprintf("%.2f", r.Shared), fmt.Sprintf("%.2f", r.SharedUtilisation)}
	}
	if mix { // the speedup of one request a second is the rate itself
		head = head[1:]
		inner := cells
		cells = func(r BoundRow) []string { return inner(r)[1:] }
	}
	if o.Markdown {
		fmt.Fprintf(w, "\n| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat(" ---: |", len(head)))
		for _, r := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells(r), " | "))
		}
		fmt.Fprintln(w)
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\t\n", strings.Join(head, "\t"))
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells(r), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for i, u := range []float64{1, o.MaxUtil} {
		if i > 0 && (u == 1 || u == 0) {
			break
		}
		x, xs := d.Crossing(cfg.Devices, u, false), d.Crossing(cfg.Devices, u, true)
		if mix {
			fmt.Fprintf(w, "utilisation %g of %d devices at %.1f requests/s; %.1f with fixed costs shared", u, cfg.Devices, x, xs)
		} else {
			fmt.Fprintf(w, "utilisation %g of %d devices at speedup %.2f (%.2f requests/s); %.2f with fixed costs shared", u, cfg.Devices, x, d.Rate(x), xs)
		}
		if u == 1 {
			fmt.Fprint(w, ": no placement serves more in steady state")
		}
		fmt.Fprintln(w)
	}
	switch {
	case o.TTFTMS > 0 && mix && o.WindowMS > 0:
		fmt.Fprintf(w, "not a bound: a run of %g s of arrivals is done on %d devices by its end plus TTFT %g ms up to %.1f requests/s, "+
			"a backlog a run this short may end with\n", o.WindowMS/1e3, cfg.Devices, o.TTFTMS, d.MixWindowRate(cfg.Devices, o.WindowMS, o.TTFTMS))
	case o.TTFTMS > 0 && !mix:
		x := d.WindowSpeedup(cfg.Devices, o.TTFTMS)
		fmt.Fprintf(w, "not a bound: this window's work (%.0f device-s) is done on %d devices by its last arrival plus TTFT %g ms up to speedup %.2f, "+
			"a backlog a window this short may end with\n", d.TotalMS()/1e3, cfg.Devices, o.TTFTMS, x)
	}
	_, err := fmt.Fprintln(w)
	return err
}
