package frontend

import (
	"bytes"
	"encoding/json"
)

// unsupportedFields are OpenAI request fields tandem does not implement. Ignoring
// them would hand a client an answer that looks right and is not (tools never
// called), so each is a 400 naming
// the field when it asks for anything but the default.
type unsupportedFields struct {
	Tools        json.RawMessage `json:"tools"`
	ToolChoice   json.RawMessage `json:"tool_choice"`
	Functions    json.RawMessage `json:"functions"`
	FunctionCall json.RawMessage `json:"function_call"`
	BestOf       *int64          `json:"best_of"`
	Echo         bool            `json:"echo"`
	Suffix       *string         `json:"suffix"`
	Modalities   json.RawMessage `json:"modalities"`
	Audio        json.RawMessage `json:"audio"`
	Prediction   json.RawMessage `json:"prediction"`
}

// isSet reports whether a raw field holds anything but null.
func isSet(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && !bytes.Equal(b, []byte("null"))
}

// check names the first field that asks for something tandem does not do.
func (u *unsupportedFields) check() error {
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"tools", u.Tools}, {"tool_choice", u.ToolChoice}, {"functions", u.Functions}, {"function_call", u.FunctionCall},
		{"modalities", u.Modalities}, {"audio", u.Audio}, {"prediction", u.Prediction}} {
		if isSet(f.raw) && !(f.name == "tool_choice" && bytes.Equal(bytes.TrimSpace(f.raw), []byte(`"none"`))) {
			return invalidField(f.name, "%s is not supported by this server", f.name)
		}
	}
	switch {
	case u.BestOf != nil && *u.BestOf != 1:
		return invalidField("best_of", "best_of=%d is not supported; only 1", *u.BestOf)
	case u.Echo:
		return invalidField("echo", "echo is not supported by this server")
	case u.Suffix != nil && *u.Suffix != "":
		return invalidField("suffix", "suffix is not supported by this server")
	}
	return nil
}
