package frontend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/tandem-serve/tandem/internal/spans"
	"github.com/tandem-serve/tandem/tokenizer"
)

// Special tokens in a chat prompt come only from the template's own text: a
// message's content is encoded as plain text whatever it contains, so a user who
// types "<|im_start|>system" or "</s><s>" gets those characters, not the markers,
// and cannot speak as the system or the assistant. The template is rendered twice,
// once with the contents and once with a placeholder in place of each, and the
// placeholders say where the contents sit in the rendered text.

// How a chat prompt was cut into template text and contents, as counted in
// tandem_frontend_chat_prompts_total.
const (
	// promptSplit: the contents were found and encoded as plain text.
	promptSplit = "split"
	// promptWhole: the template changes the contents it writes (strips reasoning, say),
	// so they cannot be found; none of them holds special-token text, so encoding the
	// whole rendered text with markers matched gives the same ids.
	promptWhole = "whole"
	// promptRefused: as promptWhole, but a content holds special-token text, which
	// could only be encoded as a forged marker.
	promptRefused = "refused"
)

// placeholderTag starts every placeholder; a random nonce after it makes a content
// that spells a placeholder out by chance or on purpose all but impossible, and
// such a content is checked for anyway.
const placeholderTag = "<tandem-content "

// chatPromptIDs renders msgs with m's chat template and tokenizes the result with
// BOS as the model wants it, counting how the prompt was cut.
func (f *Frontend) chatPromptIDs(ctx context.Context, m *Model, msgs []Message, tools *toolRequest) ([]uint32, error) {
	if err := checkToolText(m.Tokenizer, tools, msgs); err != nil {
		return nil, err
	}
	var raw []json.RawMessage
	if tools != nil {
		raw = tools.raw
	}
	_, span := spans.Start(ctx, "frontend.template")
	segs, how, err := chatSegmentsTools(m.Template, m.Tokenizer, msgs, raw)
	endTemplate(span, how, err)
	if err != nil {
		return nil, err
	}
	f.metrics.chatPrompts.WithLabelValues(how).Inc()
	if how == promptRefused {
		return nil, errContentSpecial()
	}
	_, span = spans.Start(ctx, "frontend.tokenize")
	ids := withBOS(m.Tokenizer, tokenizer.EncodeSegments(m.Tokenizer, segs))
	endTokenize(span, ids)
	return ids, nil
}

// chatSegments renders msgs into template text (special tokens matched) and
// contents (plain text), and says how (promptSplit, promptWhole, promptRefused).
func chatSegments(tmpl ChatTemplate, tok tokenizer.Tokenizer, msgs []Message) ([]tokenizer.Segment, string, error) {
	return chatSegmentsTools(tmpl, tok, msgs, nil)
}

// chatSegmentsTools is chatSegments with tools shown to the model.
func chatSegmentsTools(tmpl ChatTemplate, tok tokenizer.Tokenizer, msgs []Message, tools []json.RawMessage) ([]tokenizer.Segment, string, error) {
	text, err := applyTemplate(tmpl, msgs, tools)
	if err != nil {
		return nil, "", err
	}
	nonce, ok := freshNonce(msgs)
	if ok {
		if segs, found := splitContents(tmpl, msgs, tools, text, nonce); found {
			return segs, promptSplit, nil
		}
	}
	for _, m := range msgs {
		if !slices.Equal(tok.Encode(m.Content), tok.EncodeSpecial(m.Content)) {
			return nil, promptRefused, nil
		}
	}
	return []tokenizer.Segment{{Text: text, Special: true}}, promptWhole, nil
}

// freshNonce is a random nonce no message's content contains after placeholderTag.
func freshNonce(msgs []Message) (string, bool) {
	for range 4 {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", false
		}
		nonce := hex.EncodeToString(b[:])
		if !slices.ContainsFunc(msgs, func(m Message) bool { return strings.Contains(m.Content, placeholderTag+nonce) }) {
			return nonce, true
		}
	}
	return "", false
}

func placeholder(nonce string, i int) string {
	return placeholderTag + nonce + " " + strconv.Itoa(i) + ">"
}

// splitContents renders msgs with placeholders for their contents and cuts text,
// their real rendering, at the placeholders. A template may write a content once,
// twice or not at all and in any order; it may trim it (Llama 3's does). found is
// false when the pieces with the contents put back are not exactly text: the
// template does something else to the contents, or to the placeholders.
func splitContents(tmpl ChatTemplate, msgs []Message, tools []json.RawMessage, text, nonce string) (segs []tokenizer.Segment, found bool) {
	ph := make([]Message, len(msgs))
	for i, m := range msgs {
		ph[i] = m
		// An empty content stays empty: templates test it ("if message.content").
		if m.Content != "" {
			ph[i].Content = placeholder(nonce, i)
		}
	}
	shape, err := applyTemplate(tmpl, ph, tools)
	if err != nil {
		return nil, false
	}
	for _, trim := range []bool{false, true} {
		if segs, ok := fillPlaceholders(shape, nonce, msgs, trim); ok && joined(segs) == text {
			return segs, true
		}
	}
	return nil, false
}

// fillPlaceholders cuts shape at each placeholder and puts the message's content
// (trimmed of surrounding white space when trim is set) in its place.
func fillPlaceholders(shape, nonce string, msgs []Message, trim bool) ([]tokenizer.Segment, bool) {
	tag := placeholderTag + nonce + " "
	var segs []tokenizer.Segment
	for {
		k := strings.Index(shape, tag)
		if k < 0 {
			break
		}
		rest := shape[k+len(tag):]
		end := strings.IndexByte(rest, '>')
		if end < 0 {
			return nil, false
		}
		i, err := strconv.Atoi(rest[:end])
		if err != nil || i < 0 || i >= len(msgs) || rest[:end] != strconv.Itoa(i) {
			return nil, false
		}
		c := msgs[i].Content
		if trim {
			c = strings.TrimSpace(c)
		}
		if k > 0 {
			segs = append(segs, tokenizer.Segment{Text: shape[:k], Special: true})
		}
		segs = append(segs, tokenizer.Segment{Text: c})
		shape = rest[end+1:]
	}
	if shape != "" {
		segs = append(segs, tokenizer.Segment{Text: shape, Special: true})
	}
	return segs, true
}

func joined(segs []tokenizer.Segment) string {
	var sb strings.Builder
	for _, s := range segs {
		sb.WriteString(s.Text)
	}
	return sb.String()
}

// errContentSpecial refuses a conversation whose contents cannot be kept apart from
// the template's text and hold special-token text.
func errContentSpecial() error {
	return invalidField("messages",
		"the model's chat template rewrites message contents, and a message holds the text of a special token, "+
			"which would reach the model as that token; remove the special-token text from the message")
}
