package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Synth builds a trace's prompts as token ids: each hash id is one block of
// tokens, a pure function of the id and the seed, so equal ids give identical
// blocks in every prompt and every run, and a server's prefix cache sees the
// reuse the trace recorded.
//
// Different ids give different blocks by construction, not by chance: a block
// starts with its id written in base len(Vocab) (Digits tokens), and only the
// rest is drawn at random. A small vocabulary and short scaled blocks (a
// 512-token model, blocks of 16) would otherwise collide often enough to invent
// sharing the trace does not have.
type Synth struct {
	// Vocab holds the token ids prompts are made of: ordinary tokens of the
	// served model, no special ones.
	Vocab     []uint32
	BlockSize int
	Seed      uint64
	// Digits is how many leading tokens of a block spell its id.
	Digits int
}

// NewSynth returns a synthesizer over vocab (deduplicated and sorted, so the
// blocks depend on the set of tokens and not on how it was found) for ids up to
// maxID.
func NewSynth(vocab []uint32, blockSize int, seed uint64, maxID int64) (*Synth, error) {
	v := slices.Clone(vocab)
	slices.Sort(v)
	v = slices.Compact(v)
	if len(v) < 2 {
		return nil, fmt.Errorf("bench: %d distinct tokens cannot spell distinct blocks; need at least 2", len(v))
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("bench: block size %d must be positive", blockSize)
	}
	if maxID < 0 {
		return nil, errors.New("bench: hash ids must not be negative")
	}
	digits := 1
	for span := uint64(len(v)); span <= uint64(maxID); digits++ {
		if span > math.MaxUint64/uint64(len(v)) {
			digits++
			break
		}
		span *= uint64(len(v))
	}
	if digits > blockSize {
		return nil, fmt.Errorf("bench: blocks of %d tokens are too short to keep %d block ids apart with %d distinct tokens (need %d); "+
			"raise --trace-token-scale", blockSize, maxID+1, len(v), digits)
	}
	return &Synth{Vocab: v, BlockSize: blockSize, Seed: seed, Digits: digits}, nil
}

// Block returns the tokens of the block named id.
func (s *Synth) Block(id int64) []uint32 {
	b := make([]uint32, s.BlockSize)
	s.fill(b, id)
	return b
}

// fill writes the block named id into b, which is at most BlockSize long (a
// partial last block is the start of the full one).
func (s *Synth) fill(b []uint32, id int64) {
	n := uint64(len(s.Vocab))
	x := uint64(id)
	for i := 0; i < s.Digits && i < len(b); i++ {
		b[i] = s.Vocab[x%n]
		x /= n
	}
	if len(b) <= s.Digits {
		return
	}
	rng := rand.New(rand.NewPCG(s.Seed, uint64(id)*0x9e3779b97f4a7c15+1))
	for i := s.Digits; i < len(b); i++ {
		b[i] = s.Vocab[rng.IntN(len(s.Vocab))]
	}
}

// Prompt returns the prompt of n tokens made of the blocks ids, the last one cut
// to fit.
func (s *Synth) Prompt(ids []int64, n int) ([]uint32, error) {
	if n < 1 || n > len(ids)*s.BlockSize || n <= (len(ids)-1)*s.BlockSize {
		return nil, fmt.Errorf("bench: %d tokens do not fill %d blocks of %d", n, len(ids), s.BlockSize)
	}
	p := make([]uint32, n)
	for i, id := range ids {
		lo := i * s.BlockSize
		s.fill(p[lo:min(lo+s.BlockSize, n)], id)
	}
	return p, nil
}
