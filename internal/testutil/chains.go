package testutil

import (
	"math/rand/v2"
	"slices"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// Chains builds n prompts' block hashes (16 tokens a block, blocks blocks each)
// that share prefixes of random lengths, as multi-turn chats and shared system
// prompts do: for KV index and routing tests.
func Chains(rng *rand.Rand, n, blocks int) [][]uint64 {
	tokensOf := map[uint64][]uint32{} // a block's hash -> the tokens up to its end
	out := make([][]uint64, n)
	for i := range out {
		var toks []uint32
		if i > 0 && rng.IntN(3) > 0 {
			prev := out[rng.IntN(i)]
			if keep := rng.IntN(len(prev) + 1); keep > 0 {
				toks = slices.Clone(tokensOf[prev[keep-1]])
			}
		}
		for len(toks) < blocks*16 {
			toks = append(toks, uint32(rng.IntN(100000)))
		}
		out[i] = blockhash.Hash(toks, 16)
		for j, h := range out[i] {
			tokensOf[h] = toks[:(j+1)*16]
		}
	}
	return out
}
