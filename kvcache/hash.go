// Package kvcache holds what the frontend, the router and the engines must agree on
// about the KV cache: how prompt blocks are hashed, and the log of cache events.
package kvcache

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// DefaultBlockSize is the tokens per KV block unless a model says otherwise (vLLM's default).
const DefaultBlockSize = 16

// HashSeed is fixed so that every process, and other systems using the same scheme
// (Dynamo's XXH3-64 with seed 1337), agree on block identities.
const HashSeed = 1337

// HashBlocks returns the chained hash of every full block of tokens: block i's hash
// covers block i's tokens and, through its parent, every token before it. A trailing
// partial block has no hash, since its KV is not reusable yet.
func HashBlocks(tokens []uint32, blockSize int) []uint64 {
	return AppendHashes(nil, 0, tokens, blockSize)
}

// AppendHashes hashes the full blocks of tokens, chaining from parent (0 for the
// start of a prompt), and appends the hashes to dst.
func AppendHashes(dst []uint64, parent uint64, tokens []uint32, blockSize int) []uint64 {
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
