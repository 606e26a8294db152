package router

import (
	"math/rand/v2"
	"slices"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// The same generator as kvindex's tests (test files are not shared across
// packages): the router's tests route over the prefixes it makes.
//
// chains builds n prompts' block hashes that share prefixes of random lengths, as
// multi-turn chats and shared system prompts do.
func chains(rng *rand.Rand, n, blocks int) [][]uint64 {
	out := make([][]uint64, n)
	for i := range out {
		var toks []uint32
		if i > 0 && rng.IntN(3) > 0 {
			prev := out[rng.IntN(i)]
			keep := rng.IntN(len(prev) + 1)
			// Re-derive the shared part's tokens from the same seed as its origin.
			toks = append(toks, tokensFor(prev[:keep])...)
		}
		for len(toks) < blocks*16 {
			toks = append(toks, uint32(rng.IntN(100000)))
		}
		out[i] = blockhash.Hash(toks, 16)
		remember(out[i], toks)
	}
	return out
}

var tokensOf = map[uint64][]uint32{}

func remember(hashes []uint64, toks []uint32) {
	for i, h := range hashes {
		tokensOf[h] = toks[:(i+1)*16]
	}
}

func tokensFor(prefix []uint64) []uint32 {
	if len(prefix) == 0 {
		return nil
	}
	return slices.Clone(tokensOf[prefix[len(prefix)-1]])
}
