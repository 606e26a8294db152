package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

func TestAPIKeys(t *testing.T) {
	cfg := testConfig()
	cfg.APIKeys = []string{"sk-good", "sk-other"}
	f, _ := newTestFrontend(t, cfg, &fakeBackend{output: []uint32{9906}})
	srv := newHTTPServer(t, f)

	// The SDK with a wrong key sees a 401 it can recognise.
	ctx := context.Background()
	bad := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("sk-wrong"), option.WithMaxRetries(0))
	_, err := bad.Completions.New(ctx, openai.CompletionNewParams{Model: "tandem-test",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusUnauthorized || oe.Code != "invalid_api_key" || oe.Type != "authentication_error" {
		t.Fatalf("wrong key: %v", err)
	}
	good := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("sk-other"), option.WithMaxRetries(0))
	if _, err := good.Completions.New(ctx, openai.CompletionNewParams{Model: "tandem-test",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}}); err != nil {
		t.Fatalf("good key: %v", err)
	}

	// No key at all: 401, OpenAI's error shape, and the challenge header.
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"tandem-test","prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 401 || body.Error.Code != "invalid_api_key" || !strings.Contains(body.Error.Message,
		"Bearer") || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no key: %d %+v %q", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
	}
	// Health checks need no key.
	for _, path := range []string{"/healthz", "/readyz"} {
		hresp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		hresp.Body.Close()
		if hresp.StatusCode != 200 {
			t.Fatalf("%s without a key: %d", path, hresp.StatusCode)
		}
	}

	// The Connect API takes the same keys.
	c := frontendv1connect.NewFrontendServiceClient(http.DefaultClient, srv.URL)
	if _, err := c.ListModels(ctx, connect.NewRequest(&frontendv1.ListModelsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Connect without a key: %v", err)
	}
	req := connect.NewRequest(&frontendv1.ListModelsRequest{})
	req.Header().Set("Authorization", "Bearer sk-good")
	if _, err := c.ListModels(ctx, req); err != nil {
		t.Fatalf("Connect with a key: %v", err)
	}
	sreq := connect.NewRequest(&frontendv1.GenerateRequest{Prompt: "hi"})
	stream, err := c.Generate(ctx, sreq)
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Connect stream without a key: %v", err)
	}
}
