package kvcache

import (
	"fmt"
	"testing"
)

// BenchmarkNewPool is what a pool costs before it is used: the sim's default of
// 65,536 blocks, made for each of a thousand simulated workers.
func BenchmarkNewPool(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		p := NewPool(65536, NewEventLog(16))
		_ = p
	}
}

// BenchmarkAllocateRelease is a decode worker's churn: sequences of 16 blocks
// allocated, their full blocks stored, released, in a pool that fills and then
// evicts. warm is how much of the pool has been used before timing starts.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, warm := range []bool{false, true} {
		b.Run(fmt.Sprintf("warm=%v", warm), func(b *testing.B) {
			const n, seq = 65536, 16
			p := NewPool(n, NewEventLog(1024))
			hashes := make([]uint64, seq)
			var ids []BlockID
			next := uint64(1)
			round := func() {
				ids, _ = p.Allocate(ids[:0], seq)
				for i := range hashes {
					hashes[i] = next
					next++
				}
				p.Store(0, ids[:seq-1], hashes[:seq-1])
				p.Release(ids)
			}
			if warm {
				for range 2 * n / seq {
					round()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				round()
			}
		})
	}
}
