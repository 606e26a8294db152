package estimate

import "slices"

// maxTBTGaps bounds the gaps a stream keeps for its TBT: the k of a request of
// 2,561 tokens (the Mooncake conversation trace's longest output is 2,000,
// k 200), 2 KiB a stream. A longer request's TBT is projected from these and
// the least of them standing in for the rest (an upper bound).
const maxTBTGaps = 256

// tbtK is how many of a request's gaps its TBT averages: the longest tenth,
// at least one, as bench.Result.TBT counts them (the Mooncake paper's).
func tbtK(gaps int) int {
	if gaps <= 0 {
		return 0
	}
	return (gaps + 9) / 10
}

// tbtCapacity is how many gaps a stream of at most maxTokens tokens keeps:
// the k of its whole answer, or the bound when maxTokens is unknown (0).
func tbtCapacity(maxTokens int) int {
	if maxTokens <= 0 {
		return maxTBTGaps
	}
	return min(tbtK(maxTokens-1), maxTBTGaps)
}

// topGaps are the largest gaps of a stream so far, ascending, in a slice
// allocated once: a gap no larger than the least of a full set costs a
// comparison, a larger one a binary search and a copy of at most the set.
type topGaps struct {
	g []float64
	n int // gaps seen, kept or not
}

func newTopGaps(capacity int) topGaps { return topGaps{g: make([]float64, 0, capacity)} }

func (t *topGaps) add(x float64) {
	t.n++
	if cap(t.g) == 0 {
		return
	}
	if len(t.g) == cap(t.g) {
		if x <= t.g[0] {
			return
		}
		i, _ := slices.BinarySearch(t.g, x)
		// Drop the least: shift what is below x's place down by one.
		copy(t.g[:i-1], t.g[1:i])
		t.g[i-1] = x
		return
	}
	i, _ := slices.BinarySearch(t.g, x)
	t.g = t.g[:len(t.g)+1]
	copy(t.g[i+1:], t.g[i:])
	t.g[i] = x
}

// projectTBT is the TBT a sequence ends with when its k longest gaps are
// drawn from: the gaps it has had (top, ascending, the largest of observed;
// those not kept count as the least kept, which they do not exceed), stretched
// gaps of stretch seconds, and plain ones of step seconds. 0 when k is.
func projectTBT(top []float64, observed, k, stretched int, stretch float64, plain int, step float64) float64 {
	type run struct {
		v float64
		n int
	}
	runs := [2]run{{stretch, stretched}, {step, plain}}
	if step > stretch {
		runs[0], runs[1] = runs[1], runs[0]
	}
	i, extra := len(top)-1, 0
	if len(top) > 0 {
		extra = max(observed-len(top), 0)
	}
	r := 0
	sum, n := 0.0, 0
	for n < k {
		for r < len(runs) && runs[r].n <= 0 {
			r++
		}
		a, haveA := 0.0, i >= 0 || extra > 0
		if i >= 0 {
			a = top[i]
		} else if extra > 0 {
			a = top[0]
		}
		switch {
		case haveA && (r == len(runs) || a >= runs[r].v):
			if i >= 0 {
				i--
			} else {
				extra--
			}
			sum += a
		case r < len(runs):
			sum += runs[r].v
			runs[r].n--
		default:
			return sum / float64(max(n, 1))
		}
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
