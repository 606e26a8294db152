package integration

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

// A user runs `tandem up`, streams a chat completion through the OpenAI SDK, sees
// text arrive in pieces with exact usage at the end, and stops it with Ctrl-C.
func TestUpStreamedChat(t *testing.T) {
	p, url := startUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "tandem-tiny",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about disaggregated serving.")},
		MaxTokens:     openai.Int(12),
		Seed:          openai.Int(42),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var pieces int
	var finish string
	var usage openai.CompletionUsage
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				pieces++
				text.WriteString(ch.Delta.Content)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if pieces < 2 || text.Len() == 0 {
		t.Errorf("got %d pieces of text %q, want a streamed answer", pieces, text.String())
	}
	if finish != "length" && finish != "stop" {
		t.Errorf("finish_reason %q, want length or stop", finish)
	}
	if usage.CompletionTokens < 1 || usage.CompletionTokens > 12 || (finish == "length" && usage.CompletionTokens != 12) {
		t.Errorf("completion_tokens %d with finish %q, want 12 for length", usage.CompletionTokens, finish)
	}
	if usage.PromptTokens < 8 || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
		t.Errorf("usage %+v is not consistent", usage)
	}

	// The same port serves Connect and reflection.
	fc := frontendv1connect.NewFrontendServiceClient(http.DefaultClient, url)
	models, err := fc.ListModels(ctx, connect.NewRequest(&frontendv1.ListModelsRequest{}))
	if err != nil || len(models.Msg.GetModels()) != 1 || models.Msg.GetModels()[0].GetId() != "tandem-tiny" {
		t.Errorf("ListModels over Connect = %v, %v", models, err)
	}
	rs := grpcreflect.NewClient(rpctest.Client(t), url, connect.WithGRPC()).NewStream(ctx)
	names, err := rs.ListServices()
	_, _ = rs.Close()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	joined := ""
	for _, n := range names {
		joined += string(n) + " "
	}
	for _, want := range []string{"tandem.frontend.v1.FrontendService", "grpc.health.v1.Health"} {
		if !strings.Contains(joined, want) {
			t.Errorf("reflection lists %q, want %s", joined, want)
		}
	}

	// tandem up says where its router is; tandem workers lists the workers there.
	select {
	case addr := <-p.routerAddr:
		out, err := exec.Command(tandemBin, "workers", "--router", addr).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "decode-0") || !strings.Contains(string(out), "prefill-0") {
			t.Errorf("tandem workers --router %s: %v\n%s\nwant decode-0 and prefill-0", addr, err, out)
		}
	case <-time.After(10 * time.Second):
		t.Error("tandem up printed no router line after ready")
	}

	if err := p.stop(t); err != nil {
		t.Errorf("tandem up exited with %v after SIGINT, want a clean exit", err)
	}
}
