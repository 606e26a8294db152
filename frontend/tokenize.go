package frontend

import (
	"fmt"
	"net/http"

	"github.com/tandem-serve/tandem/tokenizer"
)

// /tokenize and /detokenize answer as vLLM's do, so tools written against vLLM
// (prompt budgeting, client-side caching) work against tandem: the served model's
// own tokenizer and chat template, exactly as a generation request would use them.

type tokenizeRequest struct {
	Model string `json:"model"`
	// Prompt, or Messages rendered with the chat template.
	Prompt              *string       `json:"prompt"`
	Messages            []chatMessage `json:"messages"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	// AddSpecialTokens adds BOS as the model does (default: true for a prompt,
	// false for messages, whose template writes its own).
	AddSpecialTokens *bool `json:"add_special_tokens"`
	ReturnTokenStrs  bool  `json:"return_token_strs"`
}

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

type detokenizeRequest struct {
	Model  string   `json:"model"`
	Tokens []uint32 `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

func (f *Frontend) handleTokenize(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	var req tokenizeRequest
	if err := f.readJSON(w, r, &req); err != nil {
		f.writeError(w, rc, err)
		return
	}
	m, err := f.served(req.Model)
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	tok := m.Tokenizer
	var ids []uint32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		f.writeError(w, rc, invalidField("messages", "give either prompt or messages, not both"))
		return
	case req.Messages != nil:
		msgs, err := chatMessages(req.Messages)
		if err != nil {
			f.writeError(w, rc, err)
			return
		}
		if req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt {
			f.writeError(w, rc, invalidField("add_generation_prompt", "add_generation_prompt=false is not supported; the prompt always ends where the reply begins"))
			return
		}
		segs, how, err := chatSegments(m.Template, tok, msgs)
		if err != nil {
			f.writeError(w, rc, err)
			return
		}
		if how == promptRefused {
			f.writeError(w, rc, errContentSpecial())
			return
		}
		ids = tokenizer.EncodeSegments(tok, segs)
		if req.AddSpecialTokens != nil && *req.AddSpecialTokens {
			ids = withBOS(tok, ids)
		}
	case req.Prompt != nil:
		ids = tok.Encode(*req.Prompt)
		if req.AddSpecialTokens == nil || *req.AddSpecialTokens {
			ids = withBOS(tok, ids)
		}
	default:
		f.writeError(w, rc, invalidField("prompt", "prompt (or messages) is required"))
		return
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: m.ContextLength, Tokens: ids}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i] = tok.Piece(id)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (f *Frontend) handleDetokenize(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	var req detokenizeRequest
	if err := f.readJSON(w, r, &req); err != nil {
		f.writeError(w, rc, err)
		return
	}
	m, err := f.served(req.Model)
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	if req.Tokens == nil {
		f.writeError(w, rc, invalidField("tokens", "tokens is required"))
		return
	}
	for i, id := range req.Tokens {
		if int(id) >= m.Tokenizer.VocabSize() {
			f.writeError(w, rc, invalidField("tokens", "token %d at index %d is outside the vocabulary of %d tokens", id, i, m.Tokenizer.VocabSize()))
			return
		}
	}
	writeJSON(w, http.StatusOK, detokenizeResponse{Prompt: m.Tokenizer.Decode(req.Tokens)})
}

// served is the current model, checked against the one a request names ("" is any).
func (f *Frontend) served(name string) (*Model, error) {
	m, err := f.current()
	if err != nil {
		return nil, err
	}
	if name != "" && name != m.ID {
		return nil, modelNotFound(name, m.ID)
	}
	return m, nil
}

// chatMessages takes the text of each message, refusing non-text parts.
func chatMessages(in []chatMessage) ([]Message, error) {
	out := make([]Message, 0, len(in))
	ids := map[string]bool{}
	for i, m := range in {
		if m.Content.hasBad {
			return nil, invalidField(fmt.Sprintf("messages[%d].content[%d].type", i, m.Content.badPart),
				"content part type %q is not supported; only text parts are", m.Content.partType)
		}
		msg := Message{Role: m.Role, Content: m.Content.Text}
		if err := historyMessage(i, m, &msg, ids); err != nil {
			return nil, err
		}
		out = append(out, msg)
	}
	return out, nil
}
