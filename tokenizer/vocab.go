package tokenizer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Vocab is the Tokenizer of a model's own vocabulary, built from a Spec by FromSpec.
type Vocab struct {
	name   string
	model  string
	byRank bool     // llama merges by rank (a Hugging Face spelling of it)
	split  splitter // gpt2 pre-tokenizer
	// ignoreMerges takes a whole pre-tokenized word that is a token as that token
	// (Llama 3), whatever the merges would make of it.
	ignoreMerges bool
	nfc          bool
	spacePrefix  bool
	prefixScheme string

	text  []string
	attr  []int32
	piece [][]byte // the bytes each token decodes to; nil for control and unused tokens
	// ids maps what the merging produces to tokens: SentencePiece text ("▁" for
	// space) for llama, raw bytes for gpt2. Only tokens text may turn into are in it,
	// never control tokens, so Encode cannot produce them.
	ids       map[string]uint32
	scores    []float32
	merges    map[uint64]merge
	byteToken [256]uint32 // noID where the vocabulary has no token for the byte
	// special lists the tokens whose text is cut out of a text before merging, longest
	// first: control and unknown tokens for EncodeSpecial, user-defined ones always.
	special        []uint32
	lstrip, rstrip map[uint32]bool

	bos, eos, unk  int32
	addBOS, addEOS bool
	stop           []uint32
}

var _ Tokenizer = (*Vocab)(nil)

// FromSpec checks s and builds its Tokenizer. A Spec that cannot be right (no tokens,
// arrays of different lengths, ids outside the vocabulary, a gpt2 model without
// merges, an unknown pre-tokenizer) is an error naming the problem. The tokenizer
// keeps s's Tokens and Scores; they must not change afterwards.
func FromSpec(s Spec) (Tokenizer, error) {
	v, err := newVocab(s)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func newVocab(s Spec) (*Vocab, error) {
	n := len(s.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: the vocabulary has no tokens")
	}
	if int64(n) >= 1<<31 {
		return nil, fmt.Errorf("tokenizer: %d tokens is more than int32 ids can number", n)
	}
	if len(s.Scores) != 0 && len(s.Scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(s.Scores), n)
	}
	if len(s.Types) != 0 && len(s.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(s.Types), n)
	}
	v := &Vocab{
		model: s.Model, nfc: s.NFC, text: s.Tokens, scores: s.Scores,
		attr: make([]int32, n), piece: make([][]byte, n), ids: make(map[string]uint32, n),
		lstrip: map[uint32]bool{}, rstrip: map[uint32]bool{},
		bos: s.BOS, eos: s.EOS, unk: s.UNK, addBOS: s.AddBOS, addEOS: s.AddEOS,
	}
	for i := range v.attr {
		v.attr[i] = TokenNormal
		if len(s.Types) > 0 {
			t := s.Types[i]
			if t < TokenUndefined || t > TokenByte {
				return nil, fmt.Errorf("tokenizer: token %d %q has type %d (want 0 to 6)", i, s.Tokens[i], t)
			}
			if t != TokenUndefined {
				v.attr[i] = t
			}
		}
	}
	for _, sp := range []struct {
		name string
		id   int32
	}{{"BOS", s.BOS}, {"EOS", s.EOS}, {"UNK", s.UNK}, {"PAD", s.PAD}, {"EOT", s.EOT}, {"EOM", s.EOM}} {
		if sp.id < NoToken || sp.id >= int32(n) {
			return nil, fmt.Errorf("tokenizer: %s id %d is outside the vocabulary of %d tokens", sp.name, sp.id, n)
		}
	}
	if s.AddBOS && s.BOS == NoToken {
		return nil, fmt.Errorf("tokenizer: add BOS is set but there is no BOS token")
	}
	if s.AddEOS && s.EOS == NoToken {
		return nil, fmt.Errorf("tokenizer: add EOS is set but there is no EOS token")
	}
	for _, l := range []struct {
		ids []int32
		set map[uint32]bool
	}{{s.LStrip, v.lstrip}, {s.RStrip, v.rstrip}} {
		for _, id := range l.ids {
			if id < 0 || id >= int32(n) {
				return nil, fmt.Errorf("tokenizer: strip id %d is outside the vocabulary of %d tokens", id, n)
			}
			l.set[uint32(id)] = true
		}
	}
	byText := make(map[string]uint32, n)
	for i, t := range s.Tokens {
		if t == "" {
			continue
		}
		if j, dup := byText[t]; dup {
			return nil, fmt.Errorf("tokenizer: token %q appears twice (ids %d and %d)", t, j, i)
		}
		byText[t] = uint32(i)
	}
	markEndOfGeneration(v, byText)

	var err error
	switch s.Model {
	case ModelLlama:
		err = v.initLlama(s, byText)
	case ModelGPT2:
		err = v.initGPT2(s, byText)
	default:
		err = fmt.Errorf("tokenizer: model %q is not supported (want %q or %q)", s.Model, ModelLlama, ModelGPT2)
	}
	if err != nil {
		return nil, err
	}
	if len(s.Merges) > 0 {
		if v.merges, err = parseMerges(s.Merges, byText, v); err != nil {
			return nil, err
		}
	}

	for i, t := range v.text {
		switch v.attr[i] {
		case TokenControl, TokenUnknown, TokenUserDefined:
			if t != "" {
				v.special = append(v.special, uint32(i))
			}
		}
	}
	slices.SortStableFunc(v.special, func(a, b uint32) int { return len(v.text[b]) - len(v.text[a]) })
	for _, id := range []int32{s.EOS, s.EOT, s.EOM} {
		if id != NoToken && !slices.Contains(v.stop, uint32(id)) {
			v.stop = append(v.stop, uint32(id))
		}
	}
	slices.Sort(v.stop)
	if len(v.stop) == 0 {
		return nil, fmt.Errorf("tokenizer: the vocabulary has no end-of-generation token (no EOS, EOT, EOM or known end-of-turn marker)")
	}
	if v.eos == NoToken {
		v.eos = int32(v.stop[0])
	}
	return v, nil
}

// initLlama builds a SentencePiece-style vocabulary. Its Pre is ignored, as
// llama.cpp ignores tokenizer.ggml.pre for these.
func (v *Vocab) initLlama(s Spec, byText map[string]uint32) error {
	switch s.SpacePrefixScheme {
	case PrefixLegacy, PrefixAlways, PrefixFirst:
	default:
		return fmt.Errorf("tokenizer: space prefix scheme %q is not one of %q, %q, %q", s.SpacePrefixScheme, PrefixLegacy, PrefixAlways, PrefixFirst)
	}
	v.spacePrefix, v.prefixScheme = s.AddSpacePrefix, s.SpacePrefixScheme
	v.byRank = len(s.Merges) > 0
	v.name = "llama-spm"
	if v.byRank {
		v.name = "llama-spm:merges"
	}
	for i := range v.byteToken {
		v.byteToken[i] = noID
	}
	for i, t := range v.text {
		id := uint32(i)
		switch v.attr[i] {
		case TokenNormal, TokenUserDefined:
			if t != "" {
				v.ids[t] = id
			}
			if v.attr[i] == TokenNormal {
				v.piece[i] = []byte(strings.ReplaceAll(t, "▁", " "))
			} else {
				v.piece[i] = []byte(t)
			}
		case TokenByte:
			b, ok := parseByteToken(t)
			if !ok {
				return fmt.Errorf("tokenizer: byte token %d is %q, want <0xNN>", i, t)
			}
			v.piece[i] = []byte{b}
		}
	}
	// As llama.cpp: a byte is its <0xNN> token, else the token of the byte itself.
	for b := range 256 {
		if id, ok := byText[fmt.Sprintf("<0x%02X>", b)]; ok {
			v.byteToken[b] = id
		} else if id, ok := byText[string([]byte{byte(b)})]; ok && v.attr[id] == TokenNormal {
			v.byteToken[b] = id
		}
	}
	return nil
}

func (v *Vocab) initGPT2(s Spec, byText map[string]uint32) error {
	family, err := preFamily(s.Pre)
	if err != nil {
		return err
	}
	if len(s.Merges) == 0 {
		return fmt.Errorf("tokenizer: a gpt2 (byte-level BPE) vocabulary needs merges, and this one has none")
	}
	if s.SpacePrefixScheme != PrefixLegacy {
		return fmt.Errorf("tokenizer: a space prefix scheme (%q) applies to llama vocabularies only", s.SpacePrefixScheme)
	}
	// add_space_prefix is meaningless for byte-level BPE: llama.cpp never adds the
	// space when encoding, so it is not stripped when decoding either.
	v.split = splitterFor(family)
	v.ignoreMerges = preFamilies[family].ignoreMerges
	v.name = "gpt2-bpe:" + family
	for i := range v.byteToken {
		v.byteToken[i] = noID
	}
	for i, t := range v.text {
		switch v.attr[i] {
		case TokenNormal:
			b, ok := unByteLevel(t)
			if !ok {
				// Not spelled byte-level (a converter's raw added token): it reads as its
				// text and merging cannot reach it.
				v.piece[i] = []byte(t)
				continue
			}
			v.piece[i] = b
			if len(b) > 0 {
				v.ids[string(b)] = uint32(i)
			}
		case TokenUserDefined:
			v.piece[i] = []byte(t)
		case TokenByte:
			if b, ok := parseByteToken(t); ok {
				v.piece[i] = []byte{b}
			}
		}
	}
	for b := range 256 {
		if id, ok := v.ids[string([]byte{byte(b)})]; ok {
			v.byteToken[b] = id
		}
	}
	return nil
}

// parseMerges reads "left right" pairs into ranks keyed by the pair's ids. As in
// Hugging Face's BPE model, a merge whose sides or result are not in the vocabulary is
// an error. A merge that would produce a control token is dropped, so that no text
// can merge into one.
func parseMerges(merges []string, byText map[string]uint32, v *Vocab) (map[uint64]merge, error) {
	out := make(map[uint64]merge, len(merges))
	for rank, m := range merges {
		// llama.cpp splits at the first space after the first byte, so a left side may
		// be a lone space.
		cut := -1
		if len(m) > 1 {
			if i := strings.IndexByte(m[1:], ' '); i >= 0 {
				cut = i + 1
			}
		}
		if cut < 0 {
			return nil, fmt.Errorf("tokenizer: merge %d %q is not two tokens separated by a space", rank, m)
		}
		left, right := m[:cut], m[cut+1:]
		l, okl := byText[left]
		r, okr := byText[right]
		res, okres := byText[left+right]
		switch {
		case !okl:
			return nil, fmt.Errorf("tokenizer: merge %d %q: %q is not in the vocabulary", rank, m, left)
		case !okr:
			return nil, fmt.Errorf("tokenizer: merge %d %q: %q is not in the vocabulary", rank, m, right)
		case !okres:
			return nil, fmt.Errorf("tokenizer: merge %d %q: the result %q is not in the vocabulary", rank, m, left+right)
		}
		if a := v.attr[res]; a == TokenControl || a == TokenUnknown || a == TokenUnused {
			continue
		}
		key := pairKey(l, r)
		if _, seen := out[key]; !seen {
			out[key] = merge{rank: int32(rank), result: res}
		}
	}
	return out, nil
}

// parseByteToken reads "<0xNN>".
func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	b, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(b), err == nil
}

// Name implements Tokenizer.
func (v *Vocab) Name() string { return v.name }

// Encode implements Tokenizer.
func (v *Vocab) Encode(text string) []uint32 { return v.encode(text, false) }

// EncodeSpecial implements Tokenizer.
func (v *Vocab) EncodeSpecial(text string) []uint32 { return v.encode(text, true) }

func (v *Vocab) encode(text string, parseSpecial bool) []uint32 {
	return v.encodeFragments(text, v.partition(text, parseSpecial))
}

// encodeFragments encodes text already cut into special tokens and runs of text.
func (v *Vocab) encodeFragments(text string, frags []fragment) []uint32 {
	var out []uint32
	afterSpecial := true
	for _, f := range frags {
		if f.token {
			out = append(out, f.id)
			afterSpecial = true
			continue
		}
		s := text[f.start:f.end]
		if v.nfc {
			s = norm.NFC.String(s)
		}
		switch v.model {
		case ModelLlama:
			if v.spacePrefix && v.prefixes(s, f.start == 0, afterSpecial) {
				s = " " + s
			}
			s = strings.ReplaceAll(s, " ", "▁")
			if v.byRank {
				out = v.encodeSPMByRank(s, out)
			} else {
				out = v.encodeSPM(s, out)
			}
		case ModelGPT2:
			v.split(llamaText(s), func(w string) { out = v.encodeWord(w, out) })
		}
		afterSpecial = false
	}
	return out
}

// prefixes says whether a run of text gets the "▁" prefix.
func (v *Vocab) prefixes(s string, atStart, afterSpecial bool) bool {
	switch v.prefixScheme {
	case PrefixAlways:
		return !strings.HasPrefix(s, " ")
	case PrefixFirst:
		return atStart && !strings.HasPrefix(s, " ")
	}
	return afterSpecial
}

// encodeWord appends the tokens of one pre-tokenized word of a gpt2 vocabulary.
func (v *Vocab) encodeWord(w string, out []uint32) []uint32 {
	if v.ignoreMerges {
		if id, ok := v.ids[w]; ok {
			return append(out, id)
		}
	}
	if len(w) == 1 {
		if id := v.byteToken[w[0]]; id != noID {
			out = append(out, id)
		}
		return out
	}
	var buf [64]uint32
	ids := buf[:0]
	for i := 0; i < len(w); i++ {
		ids = append(ids, v.byteToken[w[i]])
	}
	return mergeByRank(ids, v.merges, out)
}

// mergeable is the token text may merge into, if any.
func (v *Vocab) mergeable(text string) (uint32, bool) {
	id, ok := v.ids[text]
	return id, ok
}

// Decode implements Tokenizer.
func (v *Vocab) Decode(ids []uint32) string {
	d := NewDetokenizer(v).StartOfText()
	return d.Add(ids...) + d.Flush()
}

func (v *Vocab) stripsLeadingSpace() bool { return v.model == ModelLlama && v.spacePrefix }

// TokenBytes implements Tokenizer.
func (v *Vocab) TokenBytes(id uint32) ([]byte, bool) {
	if int(id) >= len(v.piece) {
		return nil, false
	}
	return v.piece[id], true
}

// Piece implements Tokenizer.
func (v *Vocab) Piece(id uint32) string {
	if int(id) >= len(v.text) {
		return ""
	}
	return v.text[id]
}

// VocabSize implements Tokenizer.
func (v *Vocab) VocabSize() int { return len(v.text) }

// BOS implements Tokenizer.
func (v *Vocab) BOS() (uint32, bool) { return uint32(v.bos), v.bos != NoToken }

// AddBOS implements Tokenizer.
func (v *Vocab) AddBOS() bool { return v.addBOS }

// AddEOS says whether a prompt should end with EOS (rare; no chat model asks it).
func (v *Vocab) AddEOS() bool { return v.addEOS }

// EOS implements Tokenizer. A vocabulary without an EOS id gives its first stop token.
func (v *Vocab) EOS() uint32 { return uint32(v.eos) }

// StopTokens implements Tokenizer.
func (v *Vocab) StopTokens() []uint32 { return slices.Clone(v.stop) }

// IsSpecial implements Tokenizer.
func (v *Vocab) IsSpecial(id uint32) bool {
	if int(id) >= len(v.attr) {
		return false
	}
	a := v.attr[id]
	return a == TokenControl || a == TokenUnknown
}
