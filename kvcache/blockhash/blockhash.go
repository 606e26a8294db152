// Package blockhash is how the frontend, the router and the engines name prompt
// blocks: a chained hash of each full block. It is its own package so that the
// frontend, which hashes every prompt, links nothing else of the KV cache.
package blockhash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// DefaultBlockSize is the tokens per KV block unless a model says otherwise (vLLM's default).
const DefaultBlockSize = 16

// HashSeed is fixed so that every process, and other systems using the same scheme
// (Dynamo's XXH3-64 with seed 1337), agree on block identities.
const HashSeed = 1337

// Hash returns the chained hash of every full block of tokens: block i's hash
// covers block i's tokens and, through its parent, every token before it. A trailing
// partial block has no hash, since its KV is not reusable yet.
func Hash(tokens []uint32, blockSize int) []uint64 {
	return Append(nil, 0, tokens, blockSize)
}

// Append hashes the full blocks of tokens, chaining from parent (0 for the
// start of a prompt), and appends the hashes to dst.
func Append(dst []uint64, parent uint64, tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	buf := make([]byte, 4*blockSize)
	var pair [16]byte
	first := parent == 0
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		for i, t := range tokens[start : start+blockSize] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		local := xxh3.HashSeed(buf, HashSeed)
		var h uint64
		if first {
			h = local
			first = false
		} else {
			binary.LittleEndian.PutUint64(pair[:8], parent)
			binary.LittleEndian.PutUint64(pair[8:], local)
			h = xxh3.HashSeed(pair[:], HashSeed)
		}
		dst = append(dst, h)
		parent = h
	}
	return dst
}
