package blockhash_test

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

func seq(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func TestHashBlocksFullBlocksOnly(t *testing.T) {
	const bs = 4
	for n, want := range map[int]int{0: 0, 1: 0, 3: 0, 4: 1, 5: 1, 7: 1, 8: 2, 13: 3} {
		if got := len(blockhash.Hash(seq(n, 1), bs)); got != want {
			t.Errorf("%d tokens in blocks of %d: %d hashes, want %d", n, bs, got, want)
		}
	}
	// The trailing partial block does not change the full blocks' hashes.
	if a, b := blockhash.Hash(seq(8, 1), bs), blockhash.Hash(seq(11, 1), bs); !slices.Equal(a, b) {
		t.Errorf("a partial tail changed the hashes: %x vs %x", a, b)
	}
	if got := blockhash.Hash(seq(8, 1), 0); len(got) != 0 {
		t.Errorf("block size 0 gave %x", got)
	}
}

func TestHashBlocksDeterministic(t *testing.T) {
	toks := seq(64, 100)
	a := blockhash.Hash(toks, blockhash.DefaultBlockSize)
	b := blockhash.Hash(slices.Clone(toks), blockhash.DefaultBlockSize)
	if len(a) != 4 || !slices.Equal(a, b) {
		t.Fatalf("hashes %x then %x", a, b)
	}
	// Every block hash is distinct, and none is 0 (which means "no parent").
	for i, h := range a {
		if h == 0 || slices.Index(a, h) != i {
			t.Errorf("block %d hash %x is zero or repeated in %x", i, h, a)
		}
	}
	if got := blockhash.Hash(seq(4, 0), 4); got[0] == blockhash.Hash(seq(4, 1), 4)[0] {
		t.Errorf("different tokens hash alike: %x", got)
	}
}

// TestHashBlocksScheme pins the scheme every process (and Dynamo's router) must
// agree on: XXH3-64 with seed 1337 over the block's tokens as little-endian uint32;
// after the first block, XXH3-64 with the same seed over parent || local hash.
func TestHashBlocksScheme(t *testing.T) {
	const bs = 4
	toks := seq(12, 50)
	local := func(b []uint32) uint64 {
		buf := make([]byte, 0, 4*len(b))
		for _, x := range b {
			buf = binary.LittleEndian.AppendUint32(buf, x)
		}
		return xxh3.HashSeed(buf, 1337)
	}
	want := []uint64{local(toks[0:4])}
	for i := 1; i < 3; i++ {
		pair := binary.LittleEndian.AppendUint64(nil, want[i-1])
		pair = binary.LittleEndian.AppendUint64(pair, local(toks[4*i:4*i+4]))
		want = append(want, xxh3.HashSeed(pair, 1337))
	}
	if got := blockhash.Hash(toks, bs); !slices.Equal(got, want) {
		t.Fatalf("HashBlocks = %x, the scheme gives %x", got, want)
	}
}

func TestHashBlocksChaining(t *testing.T) {
	const bs = 4
	block := []uint32{7, 8, 9, 10}
	a := blockhash.Hash(append([]uint32{1, 2, 3, 4}, block...), bs)
	b := blockhash.Hash(append([]uint32{1, 2, 3, 5}, block...), bs)
	if a[1] == b[1] {
		t.Errorf("the same block after different prefixes hashed alike (%x): the hash must cover the parent", a[1])
	}
	// Alone, the block hashes differently from the same block with a parent.
	if alone := blockhash.Hash(block, bs); alone[0] == a[1] {
		t.Errorf("a block hashes the same at the start of a prompt as after a prefix")
	}
	// A common prefix gives a common hash prefix, and the first difference changes
	// that block and every one after it.
	x := seq(32, 0)
	y := slices.Clone(x)
	y[13] = 999 // block 3 of 8
	hx, hy := blockhash.Hash(x, bs), blockhash.Hash(y, bs)
	for i := range hx {
		if same := hx[i] == hy[i]; same != (i < 3) {
			t.Errorf("block %d: equal=%v, want %v", i, same, i < 3)
		}
	}
	// Order within a block matters.
	if blockhash.Hash([]uint32{1, 2, 3, 4}, bs)[0] == blockhash.Hash([]uint32{2, 1, 3, 4}, bs)[0] {
		t.Error("swapped tokens hash alike")
	}
}

func TestAppendHashesContinues(t *testing.T) {
	const bs = 4
	toks := seq(40, 3)
	whole := blockhash.Hash(toks, bs)
	for split := 1; split < len(whole); split++ {
		head := blockhash.Hash(toks[:split*bs], bs)
		got := blockhash.Append(slices.Clone(head), head[len(head)-1], toks[split*bs:], bs)
		if !slices.Equal(got, whole) {
			t.Errorf("continuing after %d blocks: %x, want %x", split, got, whole)
		}
		// Continuing into an empty dst gives just the new hashes.
		tail := blockhash.Append(nil, head[len(head)-1], toks[split*bs:], bs)
		if !slices.Equal(tail, whole[split:]) {
			t.Errorf("tail after %d blocks into nil: %x, want %x", split, tail, whole[split:])
		}
	}
	// AppendHashes from parent 0 with an empty dst is HashBlocks.
	if got := blockhash.Append(nil, 0, toks, bs); !slices.Equal(got, whole) {
		t.Errorf("AppendHashes(nil, 0) = %x, want %x", got, whole)
	}
}

// Hashes appended after unrelated ones are those of the prompt alone: what is
// already in dst must not change the chain.
func TestAppendHashesIgnoresExistingDst(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	got := blockhash.Append([]uint64{42}, 0, toks, 4)
	want := append([]uint64{42}, blockhash.Hash(toks, 4)...)
	if !slices.Equal(got, want) {
		t.Fatalf("AppendHashes onto [42] = %x, want %x", got, want)
	}
}
