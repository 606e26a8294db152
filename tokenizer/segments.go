package tokenizer

import "strings"

// Segment is a piece of a text to encode and whether the text of special tokens in it
// becomes those tokens: a chat template's own markers do, a message's content does not.
type Segment struct {
	Text    string
	Special bool
}

// segmentEncoder is implemented by the tokenizers of this package.
type segmentEncoder interface {
	encodeSegments(segs []Segment) []uint32
}

// EncodeSegments encodes the concatenation of segs as one text, so that the runs of
// text between special tokens merge as they would in EncodeSpecial, but matches
// special tokens only inside the segments that allow it. A tokenizer from outside
// this package encodes each segment on its own.
func EncodeSegments(t Tokenizer, segs []Segment) []uint32 {
	if se, ok := t.(segmentEncoder); ok {
		return se.encodeSegments(segs)
	}
	var out []uint32
	for _, s := range segs {
		if s.Special {
			out = append(out, t.EncodeSpecial(s.Text)...)
		} else {
			out = append(out, t.Encode(s.Text)...)
		}
	}
	return out
}

func (v *Vocab) encodeSegments(segs []Segment) []uint32 {
	var sb strings.Builder
	var frags []fragment
	for _, s := range segs {
		at := sb.Len()
		sb.WriteString(s.Text)
		for _, f := range v.partition(s.Text, s.Special) {
			if !f.token {
				f.start += at
				f.end += at
				// A run that continues the previous segment's run is one run of text.
				if n := len(frags); n > 0 && !frags[n-1].token && frags[n-1].end == f.start {
					frags[n-1].end = f.end
					continue
				}
			}
			frags = append(frags, f)
		}
	}
	return v.encodeFragments(sb.String(), frags)
}

func (t *Tiktoken) encodeSegments(segs []Segment) []uint32 {
	var out []uint32
	var run strings.Builder
	for _, s := range segs {
		if !s.Special {
			run.WriteString(s.Text)
			continue
		}
		// EncodeSpecial of the run so far plus this segment would match a marker split
		// across them; cut this segment's markers alone, then encode the text between.
		text := s.Text
		for text != "" {
			at, id := t.nextSpecial(text)
			run.WriteString(text[:at])
			if at == len(text) {
				break
			}
			out = append(out, t.Encode(run.String())...)
			run.Reset()
			out = append(out, id)
			text = text[at+len(cl100kSpecial[id]):]
		}
	}
	return append(out, t.Encode(run.String())...)
}
