package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Detokenizer turns a stream of token ids into text as they arrive. A byte-level BPE
// token may hold only part of a multi-byte character (CJK, emoji), so the bytes of an
// unfinished character are held back until the tokens that complete it arrive; a
// client never receives half a character, and every piece returned is valid UTF-8.
//
// The zero value is not usable; call NewDetokenizer.
type Detokenizer struct {
	tok     Tokenizer
	pending []byte
	// strip drops the leading space of the next token that has text (StartOfText).
	strip bool
}

// NewDetokenizer returns a Detokenizer for tok.
func NewDetokenizer(tok Tokenizer) *Detokenizer {
	return &Detokenizer{tok: tok}
}

// StartOfText says that the ids added next begin a text, as a generation after a
// prompt of BOS alone does: a SentencePiece tokenizer spells the first word with the
// space it put before it ("▁Once"), and that space is dropped, as Decode drops it. A
// generation that continues a prompt's text must not call it. It returns d.
func (d *Detokenizer) StartOfText() *Detokenizer {
	d.strip = stripsLeadingSpace(d.tok)
	return d
}

// Add appends ids and returns the text that is now complete. Special tokens and ids
// outside the vocabulary contribute no text.
func (d *Detokenizer) Add(ids ...uint32) string {
	for _, id := range ids {
		if d.tok.IsSpecial(id) {
			continue
		}
		b, _ := d.tok.TokenBytes(id)
		if d.strip && len(b) > 0 {
			d.strip = false
			if b[0] == ' ' {
				b = b[1:]
			}
		}
		d.pending = append(d.pending, b...)
	}
	cut := completePrefix(d.pending)
	if cut == 0 {
		return ""
	}
	out := validText(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// Flush returns whatever is held back, with an unfinished character replaced by
// U+FFFD, and resets the Detokenizer. Call it once the stream has ended.
func (d *Detokenizer) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	out := validText(d.pending)
	d.pending = d.pending[:0]
	return out
}

// Pending reports how many bytes are held back.
func (d *Detokenizer) Pending() int { return len(d.pending) }

// completePrefix returns the length of the longest prefix of b that does not end
// inside a character that later bytes could still complete.
func completePrefix(b []byte) int {
	// A UTF-8 character is at most 4 bytes, so only the last 3 can start an
	// unfinished one.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		// FullRune treats an invalid start byte as complete, so garbage is not held
		// back forever waiting for bytes that cannot fix it.
		if !utf8.FullRune(b[i:]) {
			return i
		}
		return len(b)
	}
	return len(b)
}

// validText is b with each maximal invalid subpart (the longest run that could
// start a character, or else one byte) replaced by U+FFFD, as Unicode recommends and
// Python's errors="replace" does. Unlike replacing whole runs of invalid bytes, this
// gives the same text however the bytes were cut into pieces, so streamed text
// equals Decode's.
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			n = invalidLen(b)
			sb.WriteString("\uFFFD")
		} else {
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

// invalidLen is the length of the maximal subpart at the start of b, which does not
// begin a valid character.
func invalidLen(b []byte) int {
	for n := min(len(b), utf8.UTFMax-1); n > 1; n-- {
		if !utf8.FullRune(b[:n]) {
			return n
		}
	}
	return 1
}
