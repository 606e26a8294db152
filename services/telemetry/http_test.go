package telemetry_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/engine/vllm"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/services/telemetry"
	"github.com/tandem-serve/tandem/tokenizer"
)

// The client span of a streamed engine request says how the stream ended, not
// only its HTTP status (200 for a stream that fails halfway): OK when the engine
// finished, Error with the reason when the stream broke, was garbage or ended
// without a finish reason.
func TestTraceTransportStreamStatus(t *testing.T) {
	tok, err := tokenizer.CL100K()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		fault    fakeengine.StreamFault
		want     codes.Code
		maxToken int
		stop     []uint32
	}{
		{"max_tokens reached", fakeengine.StreamOK, codes.Ok, 4, nil},
		{"stop token", fakeengine.StreamOK, codes.Ok, 8, []uint32{13}},
		{"garbage event", fakeengine.StreamGarbage, codes.Error, 8, nil},
		{"connection dropped", fakeengine.StreamDie, codes.Error, 8, nil},
		{"no finish reason", fakeengine.StreamTruncated, codes.Error, 8, nil},
		{"not an event stream", fakeengine.StreamHTML, codes.Error, 8, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			hc := openaihttp.DefaultHTTPClient()
			hc.Transport = telemetry.TraceTransport(hc.Transport, tp)
			e, err := openaihttp.New(t.Context(), openaihttp.Config{URL: f.URL(), Dialect: vllm.Dialect(), Tokenizer: tok,
				BlockSize: 16, ContextLength: 4096, HTTP: hc, MetricsInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			f.SetStreamFault(c.fault, 2) // after New's probe of how token ids come back

			ctx, parent := tp.Tracer("test").Start(t.Context(), "generate")
			s, streamErr := e.Generate(ctx, engine.Request{ID: "r1", Prompt: []uint32{1, 2, 3}, MaxTokens: c.maxToken, StopTokens: c.stop})
			if streamErr == nil {
				for streamErr == nil {
					_, streamErr = s.Next(ctx)
				}
				s.Close()
			}
			parent.End()
			if ended := errors.Is(streamErr, io.EOF); ended != (c.want == codes.Ok) {
				t.Fatalf("the stream ended with %v; the case expects it to %s", streamErr, map[bool]string{true: "finish", false: "fail"}[c.want == codes.Ok])
			}

			var got []sdktrace.ReadOnlySpan
			for _, sp := range rec.Ended() {
				if sp.Name() == "engine POST /v1/completions" {
					got = append(got, sp)
				}
			}
			if len(got) != 1 {
				t.Fatalf("%d spans of the engine request, want 1 (ended: %v)", len(got), names(rec.Ended()))
			}
			st := got[0].Status()
			if st.Code != c.want {
				t.Errorf("the engine request's span ended %s %q, want %s (the stream ended with %v)", st.Code, st.Description, c.want, streamErr)
			}
			if c.want == codes.Error && st.Description == "" {
				t.Errorf("the failed engine request's span gives no reason")
			}
			if got[0].Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("the engine request's span is not the caller's child")
			}
		})
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
