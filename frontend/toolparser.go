package frontend

import (
	"github.com/tandem-serve/tandem/tokenizer"
	"github.com/tandem-serve/tandem/toolcall"
)

// How the tool-call parser was picked, as logged and counted.
const (
	parserByFlag     = "flag"
	parserByTemplate = "template"
	parserByDefault  = "default"
)

// toolParser is the parser for m's replies: the one --tool-call-parser names, or
// the family its chat template writes calls in, or Hermes.
func (f *Frontend) toolParser(m *Model) (toolcall.Parser, string) {
	if f.cfg.ToolCallParser != "" {
		if p, err := toolcall.ByName(f.cfg.ToolCallParser); err == nil {
			return p, parserByFlag
		}
	}
	var src string
	switch t := m.Template.(type) {
	case Jinja:
		src = t.T.Source()
	case ChatML:
		// ChatML is Qwen's turn format, and ApplyTools writes calls as Qwen does.
		return toolcall.Hermes{}, parserByTemplate
	}
	if p, ok := toolcall.Detect(src); ok {
		return p, parserByTemplate
	}
	return toolcall.Hermes{}, parserByDefault
}

// markerTokens maps each of p's markers that tok has as one control token (which
// the detokenizer renders as nothing) to its text.
func markerTokens(tok tokenizer.Tokenizer, p toolcall.Parser) map[uint32]string {
	var out map[uint32]string
	for _, m := range p.Markers() {
		ids := tok.EncodeSpecial(m)
		if len(ids) == 1 && tok.IsSpecial(ids[0]) {
			if out == nil {
				out = map[uint32]string{}
			}
			out[ids[0]] = m
		}
	}
	return out
}
