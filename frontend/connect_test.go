package frontend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/internal/requestid"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

// generateResult is what a client saw of one Generate call.
type generateResult struct {
	msgs       []*frontendv1.GenerateResponse
	prefillHdr string
	code       connect.Code // 0 when the call succeeded
	message    string
	// field is the first field named in a google.rpc.BadRequest detail.
	field string
}

// rpcClient hides whether the call went over connect-go or grpc-go, so each case
// runs over both.
type rpcClient interface {
	generate(ctx context.Context, req *frontendv1.GenerateRequest, requestID string) generateResult
	listModels(ctx context.Context) (*frontendv1.ListModelsResponse, error)
}

type connectClient struct {
	c frontendv1connect.FrontendServiceClient
}

func (c connectClient) generate(ctx context.Context, m *frontendv1.GenerateRequest, requestID string) generateResult {
	req := connect.NewRequest(m)
	req.Header().Set(requestid.Header, requestID)
	var res generateResult
	stream, err := c.c.Generate(ctx, req)
	if err != nil {
		res.code, res.message = connect.CodeOf(err), err.Error()
		return res
	}
	defer stream.Close()
	for stream.Receive() {
		res.msgs = append(res.msgs, proto.CloneOf(stream.Msg()))
	}
	res.prefillHdr = stream.ResponseHeader().Get(HeaderPrefillPath)
	if err := stream.Err(); err != nil {
		res.code, res.message = connect.CodeOf(err), err.Error()
		var ce *connect.Error
		if errors.As(err, &ce) {
			for _, d := range ce.Details() {
				if v, _ := d.Value(); v != nil {
					if br, ok := v.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
						res.field = br.GetFieldViolations()[0].GetField()
					}
				}
			}
		}
	}
	return res
}

func (c connectClient) listModels(ctx context.Context) (*frontendv1.ListModelsResponse, error) {
	resp, err := c.c.ListModels(ctx, connect.NewRequest(&frontendv1.ListModelsRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

type grpcClient struct {
	c frontendv1.FrontendServiceClient
}

func (c grpcClient) generate(ctx context.Context, m *frontendv1.GenerateRequest, requestID string) generateResult {
	ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(requestid.Header), requestID)
	var res generateResult
	stream, err := c.c.Generate(ctx, m)
	if err == nil {
		for {
			var msg *frontendv1.GenerateResponse
			if msg, err = stream.Recv(); err != nil {
				break
			}
			res.msgs = append(res.msgs, msg)
		}
		if md, herr := stream.Header(); herr == nil && len(md.Get(HeaderPrefillPath)) > 0 {
			res.prefillHdr = md.Get(HeaderPrefillPath)[0]
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		s := status.Convert(err)
		res.code, res.message = connect.Code(s.Code()), s.Message()
		for _, d := range s.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				res.field = br.GetFieldViolations()[0].GetField()
			}
		}
	}
	return res
}

func (c grpcClient) listModels(ctx context.Context) (*frontendv1.ListModelsResponse, error) {
	return c.c.ListModels(ctx, &frontendv1.ListModelsRequest{})
}

// rpcClients starts f on a real HTTP/2 server, cleartext (h2c) or TLS, and returns a
// Connect client and a gRPC client for it.
func rpcClients(t *testing.T, f *Frontend, useTLS bool) map[string]rpcClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(f.ConnectHandler())
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	var httpClient *http.Client
	var creds credentials.TransportCredentials
	if useTLS {
		srv.StartTLS()
		httpClient = srv.Client()
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool})
	} else {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		httpClient = &http.Client{Transport: tr}
		creds = insecure.NewCredentials()
	}
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient(srv.Listener.Addr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return map[string]rpcClient{
		"connect":      connectClient{frontendv1connect.NewFrontendServiceClient(httpClient, srv.URL)},
		"connect+grpc": connectClient{frontendv1connect.NewFrontendServiceClient(httpClient, srv.URL, connect.WithGRPC())},
		"grpc-go":      grpcClient{frontendv1.NewFrontendServiceClient(conn)},
	}
}

func TestConnectService(t *testing.T) {
	tok := testTokenizer(t)
	for _, useTLS := range []bool{false, true} {
		b := &fakeBackend{output: tok.Encode(answer), perMsg: 1, path: decodev1.PrefillPath_PREFILL_PATH_REMOTE, cached: 32}
		f, _ := newTestFrontend(t, testConfig(), b)
		for name, c := range rpcClients(t, f, useTLS) {
			t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS]+"/"+name, func(t *testing.T) {
				testConnectGenerate(t, c, b)
				testConnectErrors(t, c)
				models, err := c.listModels(context.Background())
				if err != nil || len(models.GetModels()) != 1 || models.GetModels()[0].GetId() != "tandem-test" ||
					models.GetModels()[0].GetContextLength() != 512 {
					t.Errorf("ListModels = %v, %v", models, err)
				}
			})
		}
	}
}

func testConnectGenerate(t *testing.T, c rpcClient, b *fakeBackend) {
	msgs := []*frontendv1.ChatMessage{{Role: "user", Content: "Say hello."}}
	seed := uint64(7)
	res := c.generate(context.Background(), &frontendv1.GenerateRequest{Model: "tandem-test", Messages: msgs, Seed: &seed}, "rpc-req-1")
	if res.code != 0 {
		t.Fatalf("Generate failed: %v %s", res.code, res.message)
	}
	if len(res.msgs) < 3 {
		t.Fatalf("%d messages", len(res.msgs))
	}
	first, last := res.msgs[0], res.msgs[len(res.msgs)-1]
	if first.GetRequestId() != "rpc-req-1" || first.GetPrefill().GetPath() != "remote" ||
		first.GetPrefill().GetDecodeWorkerId() != "decode-1" || first.GetPrefill().GetPrefillWorkerId() != "prefill-7" {
		t.Errorf("first message = %v", first)
	}
	if res.prefillHdr != "remote" {
		t.Errorf("prefill header %q", res.prefillHdr)
	}
	var text strings.Builder
	for _, m := range res.msgs {
		text.WriteString(m.GetText())
	}
	if text.String() != answer {
		t.Errorf("text %q, want %q", text.String(), answer)
	}
	wantPrompt := chatPromptLen(t, Message{Role: "user", Content: "Say hello."})
	u := last.GetUsage()
	if last.GetFinishReason() != "stop" || u.GetPromptTokens() != uint32(wantPrompt) ||
		u.GetCompletionTokens() != uint32(len(testTokenizer(t).Encode(answer))) || u.GetCachedTokens() != 32 {
		t.Errorf("last message = %v", last)
	}
	if req := b.lastReq(); req.GetRequestId() != "rpc-req-1" || req.GetSampling().GetSeed() != 7 || req.GetSampling().GetLogprobs() {
		t.Errorf("backend got %v", req)
	}
	for _, m := range res.msgs {
		if m.GetLogprobs() != nil {
			t.Fatalf("logprobs not asked for, got %v", m)
		}
	}

	// Asked for: one entry per token, its text the token's, in the message whose
	// text it is part of, with the alternatives asked for.
	res = c.generate(context.Background(), &frontendv1.GenerateRequest{Prompt: "Say hello.", Logprobs: true, TopLogprobs: 2}, "rpc-req-2")
	if res.code != 0 {
		t.Fatalf("Generate with logprobs failed: %v %s", res.code, res.message)
	}
	if sp := b.lastReq().GetSampling(); !sp.GetLogprobs() || sp.GetTopLogprobs() != 2 {
		t.Errorf("sampling sent %v", sp)
	}
	var entries int
	text.Reset()
	var joined strings.Builder
	for _, m := range res.msgs {
		text.WriteString(m.GetText())
		for _, lp := range m.GetLogprobs() {
			// A piece of a multi-byte character reads U+FFFD; its bytes are exact.
			joined.Write(lp.GetBytes())
			if lp.GetLogprob() != -float32(entries)/10 || len(lp.GetTopLogprobs()) != 2 ||
				lp.GetToken() != strings.ToValidUTF8(string(lp.GetBytes()), "\uFFFD") {
				t.Errorf("entry %d: %v", entries, lp)
			}
			entries++
		}
	}
	if entries != len(testTokenizer(t).Encode(answer)) || joined.String() != text.String() {
		t.Errorf("%d entries whose bytes join to %q for text %q", entries, joined.String(), text.String())
	}
}

func testConnectErrors(t *testing.T, c rpcClient) {
	temp := float32(5)
	for _, tc := range []struct {
		name  string
		req   *frontendv1.GenerateRequest
		code  connect.Code
		word  string
		field string
	}{
		{"both", &frontendv1.GenerateRequest{Prompt: "a", Messages: []*frontendv1.ChatMessage{{Role: "user", Content: "b"}}},
			connect.CodeInvalidArgument, "prompt", "prompt"},
		{"neither", &frontendv1.GenerateRequest{}, connect.CodeInvalidArgument, "prompt", "prompt"},
		{"temperature", &frontendv1.GenerateRequest{Prompt: "a", Temperature: &temp}, connect.CodeInvalidArgument, "temperature", "temperature"},
		{"role", &frontendv1.GenerateRequest{Messages: []*frontendv1.ChatMessage{{Role: "robot", Content: "b"}}}, connect.CodeInvalidArgument,
			"messages[0].role", "messages[0].role"},
		{"model", &frontendv1.GenerateRequest{Model: "other", Prompt: "a"}, connect.CodeNotFound, "other", "model"},
		{"context", &frontendv1.GenerateRequest{Prompt: strings.Repeat("x ", 600)}, connect.CodeInvalidArgument, "context length", "prompt"},
		{"top without logprobs", &frontendv1.GenerateRequest{Prompt: "a", TopLogprobs: 2}, connect.CodeInvalidArgument, "logprobs", "top_logprobs"},
		{"top too many", &frontendv1.GenerateRequest{Prompt: "a", Logprobs: true, TopLogprobs: 21}, connect.CodeInvalidArgument, "21", "top_logprobs"},
	} {
		res := c.generate(context.Background(), tc.req, "rpc-bad")
		if res.code != tc.code || !strings.Contains(res.message, tc.word) || res.field != tc.field {
			t.Errorf("%s: code %v message %q field %q, want %v naming %q, field %q", tc.name, res.code, res.message, res.field, tc.code, tc.word, tc.field)
		}
	}
}
