package tokenizer

import (
	"slices"
	"strings"
)

// endOfGeneration lists the texts llama.cpp treats as ending generation whatever the
// file's ids say (llama-vocab.cpp, "special_eog_ids"): the end-of-turn markers of the
// chat formats in use. Such a token becomes a control token even if the file calls it
// something else, and joins the stop tokens.
var endOfGeneration = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
}

// alwaysRendered are tokens llama.cpp makes user-defined, so that they read as text,
// whatever the file says (gpt-oss's channel markers).
var alwaysRendered = []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}

// markEndOfGeneration applies llama.cpp's adjustments by token text to v's types and
// fills v.stop.
func markEndOfGeneration(v *Vocab, byText map[string]uint32) {
	for _, t := range endOfGeneration {
		if id, ok := byText[t]; ok {
			v.attr[id] = TokenControl
			v.stop = append(v.stop, id)
		}
	}
	for _, t := range alwaysRendered {
		if id, ok := byText[t]; ok {
			v.attr[id] = TokenUserDefined
		}
	}
	has := func(t string) bool { _, ok := byText[t]; return ok }
	drop := func(t string, attr int32) {
		id := byText[t]
		v.stop = slices.DeleteFunc(v.stop, func(s uint32) bool { return s == id })
		v.attr[id] = attr
	}
	// o200k_harmony and solar-open end a turn with <|return|> or <|call|>; their
	// <|end|> ends a message, not the generation.
	if has("<|end|>") && (has("<|return|>") && has("<|call|>") || has("<|calls|>") && has("<|flush|>")) {
		drop("<|end|>", TokenUserDefined)
	}
	// Gemma 4 and PaddleOCR use </s> as text.
	if has("<|tool_response>") && has("</s>") {
		drop("</s>", TokenNormal)
	}
}

// fragment is a run of text or a special token cut out of it.
type fragment struct {
	start, end int // the text's bytes, when not a token
	token      bool
	id         uint32
}

// partition cuts the special tokens out of text, as llama.cpp's
// tokenizer_st_partition does: each special token in turn, longest first, is found in
// every run of text left, leftmost occurrence first. User-defined tokens are always
// cut; control and unknown ones only when parseSpecial is set. A token marked lstrip
// or rstrip takes the ASCII whitespace beside it with it.
func (v *Vocab) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{start: 0, end: len(text)}}
	for _, id := range v.special {
		if !parseSpecial && v.attr[id] != TokenUserDefined {
			continue
		}
		tok := v.text[id]
		if !strings.Contains(text, tok) {
			continue
		}
		next := make([]fragment, 0, len(frags)+2)
		for _, f := range frags {
			if f.token {
				next = append(next, f)
				continue
			}
			start, end := f.start, f.end
			for start < end {
				k := strings.Index(text[start:end], tok)
				if k < 0 {
					next = append(next, fragment{start: start, end: end})
					break
				}
				left := start + k
				if v.lstrip[id] {
					for left > start && isASCIISpace(text[left-1]) {
						left--
					}
				}
				if left > start {
					next = append(next, fragment{start: start, end: left})
				}
				next = append(next, fragment{token: true, id: id})
				start += k + len(tok)
				if v.rstrip[id] {
					for start < end && isASCIISpace(text[start]) {
						start++
					}
				}
			}
		}
		frags = next
	}
	return frags
}

// isASCIISpace is C's isspace, which llama.cpp strips with.
func isASCIISpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
