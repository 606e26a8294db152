package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// mixBoundRequests is how many requests stand for a mix in a bound: enough that
// rounding the classes' shares moves the demand by a hundredth of a percent.
const mixBoundRequests = 10000

// MixDemand prices a mixed workload (bench's --mix) as ComputeDemand prices a
// trace: its classes in their shares, every prompt fresh (bench's mixed prompts
// share no blocks, so no cache credits any), one request a second. A speedup of
// the result is then a rate in requests/s.
func MixDemand(classes []Class, cfg BoundConfig) (Demand, error) {
	if len(classes) == 0 {
		return Demand{}, errors.New("bench bound: the mix has no classes")
	}
	for _, c := range classes {
		if !(c.Weight > 0) || math.IsInf(c.Weight, 0) || c.ISL < 1 || c.OSL < 1 {
			return Demand{}, fmt.Errorf("bench bound: mix class %q: want a positive weight and lengths", c.Name)
		}
	}
	if cfg.Cache != CacheNone {
		return Demand{}, fmt.Errorf("bench bound: --prefix-cache %s: a mix's prompts are fresh random tokens, so only %s applies", cfg.Cache, CacheNone)
	}
	reqs := make([]TraceRequest, 0, mixBoundRequests)
	for i, n := range shares(classes, mixBoundRequests) {
		for range n {
			reqs = append(reqs, TraceRequest{Line: i + 1, InputLength: classes[i].ISL, OutputLength: classes[i].OSL})
		}
	}
	for i := range reqs {
		reqs[i].At = time.Duration(i) * time.Second
	}
	d, err := ComputeDemand(reqs, cfg)
	if err != nil {
		return Demand{}, err
	}
	// n one-second slots, not the n-1 seconds between the first arrival and the
	// last: exactly one request a second.
	d.SpanMS = float64(len(reqs)) * 1e3
	d.Mix = mixString(classes)
	return d, nil
}

// shares splits n requests among the classes by weight, by largest remainder,
// so the counts sum to n.
func shares(classes []Class, n int) []int {
	var total float64
	for _, c := range classes {
		total += c.Weight
	}
	counts := make([]int, len(classes))
	rest := make([]float64, len(classes))
	given := 0
	for i, c := range classes {
		exact := float64(n) * c.Weight / total
		counts[i] = int(math.Floor(exact))
		rest[i] = exact - float64(counts[i])
		given += counts[i]
	}
	order := make([]int, len(classes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rest[a] > rest[b]:
			return -1
		case rest[a] < rest[b]:
			return 1
		}
		return 0
	})
	for _, i := range order[:n-given] {
		counts[i]++
	}
	return counts
}

// mixString writes classes back as a --mix value.
func mixString(classes []Class) string {
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = fmt.Sprintf("%g:%d/%d", c.Weight, c.ISL, c.OSL)
	}
	return strings.Join(parts, ",")
}

// MixWindowRate is the rate up to which a window of windowMS of a mix's
// arrivals is done, on devices devices, by its end plus ttftMS: the backlog a
// run that short can absorb and still answer its last prompts in time, and why
// such a run can read above the steady-state bound. Not a bound: the last
// answers' decode runs later, and a tenth of the requests may fail.
func (d Demand) MixWindowRate(devices int, windowMS, ttftMS float64) float64 {
	perRequest := d.TotalMS() / float64(d.Requests)
	return 1e3 * float64(devices) * (windowMS + ttftMS) / (windowMS * perRequest)
}
