package bench

import (
	"fmt"
	"io"
	"math"
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

// WriteBound writes the table of one cache mode and what it says: the speedup
// at which the demand fills the devices, at utilisation 1 and at maxUtil.
// ttftMS > 0 adds WindowSpeedup's line.
func WriteBound(w io.Writer, d Demand, cfg BoundConfig, speedups []float64, maxUtil, ttftMS float64, markdown bool) error {
	rows := d.Rows(speedups, cfg.Devices)
	credited := 0.0
	if d.PromptTokens > 0 {
		credited = float64(d.CachedTokens) / float64(d.PromptTokens)
	}
	fmt.Fprintf(w, "prefix cache %s: %.1f %% of prompt tokens credited; %d requests over %.1f s at speedup 1 (%.2f requests/s); "+
		"sim profile %s, %d devices, TBT %g ms; work in device-seconds per second of trace\n", cfg.Cache, 100*credited, d.Requests, d.SpanMS/1e3, d.Rate(1),
		cfg.Config.Profile.Name, cfg.Devices, cfg.TBTMS)
	if d.OverTBT > 0 {
		fmt.Fprintf(w, "%d requests decode slower than TBT %g ms even alone; priced at a batch of one\n", d.OverTBT, cfg.TBTMS)
	}
	head := []string{"speedup", "requests/s", "prefill", "decode", "total", "utilisation", "total, shared", "utilisation, shared"}
	if markdown {
		fmt.Fprintln(w)
		fmt.Fprint(w, "|")
		for _, h := range head {
			fmt.Fprintf(w, " %s |", h)
		}
		fmt.Fprint(w, "\n|")
		for range head {
			fmt.Fprint(w, " ---: |")
		}
		fmt.Fprintln(w)
		for _, r := range rows {
			fmt.Fprintf(w, "| %g | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
				r.Speedup, r.Rate, r.Prefill, r.Decode, r.Total, r.Utilisation, r.Shared, r.SharedUtilisation)
		}
		fmt.Fprintln(w)
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, h := range head {
			fmt.Fprintf(tw, "%s\t", h)
		}
		fmt.Fprintln(tw)
		for _, r := range rows {
			fmt.Fprintf(tw, "%g\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n",
				r.Speedup, r.Rate, r.Prefill, r.Decode, r.Total, r.Utilisation, r.Shared, r.SharedUtilisation)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for i, u := range []float64{1, maxUtil} {
		if i > 0 && u == 1 {
			break
		}
		x, xs := d.Crossing(cfg.Devices, u, false), d.Crossing(cfg.Devices, u, true)
		fmt.Fprintf(w, "utilisation %g of %d devices at speedup %.2f (%.2f requests/s); %.2f with fixed costs shared", u, cfg.Devices, x, d.Rate(x), xs)
		if u == 1 {
			fmt.Fprint(w, ": no placement serves more in steady state")
		}
		fmt.Fprintln(w)
	}
	if ttftMS > 0 {
		x := d.WindowSpeedup(cfg.Devices, ttftMS)
		fmt.Fprintf(w, "not a bound: this window's work (%.0f device-s) is done on %d devices by its last arrival plus TTFT %g ms up to speedup %.2f, "+
			"a backlog a window this short may end with\n", d.TotalMS()/1e3, cfg.Devices, ttftMS, x)
	}
	_, err := fmt.Fprintln(w)
	return err
}
