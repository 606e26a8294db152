package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ModelInfo is what a server says of the model it serves.
type ModelInfo struct {
	ID string `json:"id"`
	// MaxModelLen is the context length in tokens (vLLM's and tandem's
	// max_model_len); 0 when the server does not say.
	MaxModelLen int `json:"max_model_len"`
}

// ModelInfo asks GET /v1/models for the client's model (the first listed when
// the client names none).
func (c *Client) ModelInfo(ctx context.Context) (ModelInfo, error) {
	return c.modelInfo(ctx, c.Model)
}

// DiscoverModel asks GET /v1/models for the first model the server lists.
func (c *Client) DiscoverModel(ctx context.Context) (string, error) {
	m, err := c.modelInfo(ctx, "")
	return m.ID, err
}

// modelInfo is the listed model of that id, or the first listed for "".
func (c *Client) modelInfo(ctx context.Context, model string) (ModelInfo, error) {
	var list struct {
		Data []ModelInfo `json:"data"`
	}
	if err := c.getJSON(ctx, c.base()+"/models", &list); err != nil {
		return ModelInfo{}, err
	}
	for _, m := range list.Data {
		if model == "" || m.ID == model {
			return m, nil
		}
	}
	if model != "" {
		return ModelInfo{}, fmt.Errorf("GET /v1/models: the server does not list model %q", model)
	}
	return ModelInfo{}, errors.New("GET /v1/models: the server lists no models")
}

// Tokenize asks the server's /tokenize (vLLM's and tandem's) for the token ids
// of text in the served model's tokenizer, with no special tokens added.
func (c *Client) Tokenize(ctx context.Context, model, text string) ([]uint32, error) {
	ids, _, err := c.tokenize(ctx, model, text, false, false)
	return ids, err
}

// tokenize is Tokenize with the special tokens a generation adds (BOS) when
// special is set, and the tokens' pieces when strs is.
func (c *Client) tokenize(ctx context.Context, model, text string, special, strs bool) ([]uint32, []string, error) {
	body, err := json.Marshal(struct {
		Model            string `json:"model,omitempty"`
		Prompt           string `json:"prompt"`
		AddSpecialTokens bool   `json:"add_special_tokens"`
		ReturnTokenStrs  bool   `json:"return_token_strs,omitempty"`
	}{model, text, special, strs})
	if err != nil {
		return nil, nil, err
	}
	// /tokenize is beside /v1, not under it.
	u := strings.TrimSuffix(c.base(), "/v1") + "/tokenize"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("POST /tokenize: %s", httpError(resp))
	}
	var out struct {
		Tokens    []uint32 `json:"tokens"`
		TokenStrs []string `json:"token_strs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, nil, fmt.Errorf("POST /tokenize: %w", err)
	}
	switch {
	case len(out.Tokens) == 0:
		return nil, nil, errors.New("POST /tokenize: no tokens in the answer")
	case strs && len(out.TokenStrs) != len(out.Tokens):
		return nil, nil, fmt.Errorf("POST /tokenize: %d token_strs for %d tokens", len(out.TokenStrs), len(out.Tokens))
	}
	return out.Tokens, out.TokenStrs, nil
}

func (c *Client) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	resp, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	name := "GET " + strings.TrimPrefix(url, strings.TrimSuffix(c.base(), "/v1"))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", name, httpError(resp))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
