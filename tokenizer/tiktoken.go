package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// cl100k_base facts. The library ships the ordinary vocabulary (ids 0..100255) and
// knows the special ids but cannot decode them, so they are kept here.
const (
	cl100kVocabSize = 100277
	cl100kEndOfText = 100257
)

var cl100kSpecial = map[uint32]string{
	100257: "<|endoftext|>",
	100258: "<|fim_prefix|>",
	100259: "<|fim_middle|>",
	100260: "<|fim_suffix|>",
	100276: "<|endofprompt|>",
}

// Tiktoken is a Tokenizer on github.com/tiktoken-go/tokenizer.
type Tiktoken struct {
	codec tiktoken.Codec
	// pieces[id] holds the bytes of each ordinary token, built once so that
	// incremental detokenization costs a slice lookup per token.
	pieces [][]byte
	// delToken is U+007F's token (see Encode).
	delToken uint32
}

var _ Tokenizer = (*Tiktoken)(nil)

var (
	cl100kOnce sync.Once
	cl100k     *Tiktoken
	cl100kErr  error
)

// CL100K returns the cl100k_base tokenizer. The vocabulary tables are built on the
// first call (a few hundred milliseconds) and shared afterwards, since they are
// read-only.
func CL100K() (*Tiktoken, error) {
	cl100kOnce.Do(func() { cl100k, cl100kErr = newCL100K() })
	return cl100k, cl100kErr
}

func newCL100K() (*Tiktoken, error) {
	codec, err := tiktoken.Get(tiktoken.Cl100kBase)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load cl100k_base: %w", err)
	}
	t := &Tiktoken{codec: codec, pieces: make([][]byte, cl100kVocabSize)}
	for id := range uint32(cl100kVocabSize) {
		if _, special := cl100kSpecial[id]; special {
			continue
		}
		s, err := codec.Decode([]uint{uint(id)})
		if err != nil {
			// cl100k has a few unassigned ids (100256, 100261..100275); they decode to nothing.
			continue
		}
		t.pieces[id] = []byte(s)
		if s == del {
			t.delToken = id
		}
	}
	if t.delToken == 0 {
		return nil, errors.New("tokenizer: cl100k_base has no token for U+007F")
	}
	return t, nil
}

// Name implements Tokenizer.
func (t *Tiktoken) Name() string { return t.codec.GetName() }

// del is U+007F, which the cl100k split pattern as tiktoken-go runs it (through
// dlclark/regexp2) never matches, so the codec drops it although the vocabulary has
// it. Encode cuts the text at each DEL and puts the DEL's own token between.
const del = "\x7f"

// Encode implements Tokenizer.
func (t *Tiktoken) Encode(text string) []uint32 {
	if !strings.Contains(text, del) {
		return t.encode(text)
	}
	var out []uint32
	for i, part := range strings.Split(text, del) {
		if i > 0 {
			out = append(out, t.delToken)
		}
		out = append(out, t.encode(part)...)
	}
	return out
}

func (t *Tiktoken) encode(text string) []uint32 {
	if text == "" {
		return nil
	}
	ids, _, err := t.codec.Encode(text)
	if err != nil {
		// The codec fails only if its split regexp errors, which it does not do without
		// a timeout. Every byte is a token in a byte-level BPE, so bytes are still a
		// faithful (if longer) encoding, and a prompt is never lost.
		out := make([]uint32, 0, len(text))
		for i := 0; i < len(text); i++ {
			out = append(out, t.byteToken(text[i]))
		}
		return out
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

func (t *Tiktoken) byteToken(b byte) uint32 {
	ids, _, err := t.codec.Encode(string([]byte{b}))
	if err != nil || len(ids) != 1 {
		return 0
	}
	return uint32(ids[0])
}

// Decode implements Tokenizer.
func (t *Tiktoken) Decode(ids []uint32) string {
	var d Detokenizer
	d.tok = t
	out := d.Add(ids...)
	return out + d.Flush()
}

// TokenBytes implements Tokenizer.
func (t *Tiktoken) TokenBytes(id uint32) ([]byte, bool) {
	if int(id) >= len(t.pieces) {
		return nil, false
	}
	return t.pieces[id], true
}

// VocabSize implements Tokenizer.
func (t *Tiktoken) VocabSize() int { return cl100kVocabSize }

// EOS implements Tokenizer.
func (t *Tiktoken) EOS() uint32 { return cl100kEndOfText }

// StopTokens implements Tokenizer.
func (t *Tiktoken) StopTokens() []uint32 { return []uint32{cl100kEndOfText} }

// IsSpecial implements Tokenizer.
func (t *Tiktoken) IsSpecial(id uint32) bool {
	_, ok := cl100kSpecial[id]
	return ok
}

// EncodeSpecial implements Tokenizer: the text of cl100k's special tokens becomes
// their ids, the rest is encoded as Encode does.
func (t *Tiktoken) EncodeSpecial(text string) []uint32 {
	var out []uint32
	for text != "" {
		at, id := t.nextSpecial(text)
		out = append(out, t.Encode(text[:at])...)
		if at == len(text) {
			break
		}
		out = append(out, id)
		text = text[at+len(cl100kSpecial[id]):]
	}
	return out
}

// nextSpecial finds the first special token's text in text: its offset and id, or
// len(text) when there is none.
func (t *Tiktoken) nextSpecial(text string) (at int, id uint32) {
	at = len(text)
	for sid, s := range cl100kSpecial {
		// The markers do not overlap, so the earliest one found is the one to cut at.
		if i := strings.Index(text[:min(len(text), at+len(s))], s); i >= 0 && i < at {
			at, id = i, sid
		}
	}
	return at, id
}

// Piece implements Tokenizer.
func (t *Tiktoken) Piece(id uint32) string {
	if s, ok := cl100kSpecial[id]; ok {
		return s
	}
	if int(id) >= len(t.pieces) {
		return ""
	}
	return string(t.pieces[id])
}

// BOS implements Tokenizer: cl100k_base has no beginning-of-sequence token.
func (t *Tiktoken) BOS() (uint32, bool) { return 0, false }

// AddBOS implements Tokenizer.
func (t *Tiktoken) AddBOS() bool { return false }
