package frontend

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
)

// response_format reaches the worker as its constraint, from the OpenAI API and
// from the Connect API; a schema outside the subset never leaves the frontend.
func TestResponseFormatToConstraint(t *testing.T) {
	b := &fakeBackend{output: []uint32{1}}
	f, _ := newTestFrontend(t, testConfig(), b)
	h := f.HTTPHandler()
	chat := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ path, body, schema string }{
		{"/v1/chat/completions", `{` + chat + `,"response_format":{"type":"json_object"}}`, `{"type":"object"}`},
		{"/v1/completions", `{"prompt":"hi","response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"integer"}}}}`, `{"type":"integer"}`},
	} {
		if r := do(t, h, "POST", tc.path, tc.body); r.status != 200 {
			t.Fatalf("%s: %d %s", tc.body, r.status, r.body)
		}
		if got := b.lastReq().GetSampling().GetConstraint().GetJsonSchema(); got != tc.schema {
			t.Errorf("%s: worker got schema %q, want %q", tc.body, got, tc.schema)
		}
	}
	if r := do(t, h, "POST", "/v1/chat/completions", `{`+chat+`,"response_format":{"type":"text"}}`); r.status != 200 || b.lastReq().GetSampling().GetConstraint() != nil {
		t.Errorf("text: %d, constraint %v", r.status, b.lastReq().GetSampling().GetConstraint())
	}
	sent := len(b.reqs)
	r := do(t, h, "POST", "/v1/chat/completions", `{`+chat+`,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"integer","minimum":0}}}}`)
	if r.status != 400 || !strings.Contains(r.body, `keyword \"minimum\"`) || len(b.reqs) != sent {
		t.Errorf("minimum: %d %s", r.status, r.body)
	}

	for name, c := range rpcClients(t, f, false) {
		res := c.generate(context.Background(), &frontendv1.GenerateRequest{Model: "tandem-test", Prompt: "hi",
			ResponseFormat: &frontendv1.ResponseFormat{Type: "json_schema", JsonSchema: `{"enum":["a","b"]}`}}, "rpc-rf")
		if res.code != 0 || b.lastReq().GetSampling().GetConstraint().GetJsonSchema() != `{"enum":["a","b"]}` {
			t.Errorf("%s: %v %s, constraint %v", name, res.code, res.message, b.lastReq().GetSampling().GetConstraint())
		}
		res = c.generate(context.Background(), &frontendv1.GenerateRequest{Model: "tandem-test", Prompt: "hi",
			ResponseFormat: &frontendv1.ResponseFormat{Type: "json_schema", JsonSchema: `{"not":{}}`}}, "rpc-rf2")
		if res.code != connect.CodeInvalidArgument || !strings.Contains(res.message, `"not"`) {
			t.Errorf("%s: a not schema: %v %s", name, res.code, res.message)
		}
	}
}
