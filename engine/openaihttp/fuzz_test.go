package openaihttp

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// The engines' answers are parsed by ParseCompletion, the event stream by
// events, the metrics by ParseMetrics: none may panic or hang on any input, and
// what they accept must be usable.

func FuzzParseCompletion(f *testing.F) {
	f.Add([]byte(`{"id":"cmpl-1","choices":[{"index":0,"text":" hi","token_ids":[11,12],"finish_reason":null}],"usage":null}`))
	f.Add([]byte(`{"choices":[{"index":0,"text":"","logprobs":{"tokens":["token_id:5"],"token_logprobs":[-0.1],` +
		`"top_logprobs":[{"token_id:5":-0.1,"x":-2}]},"finish_reason":"length"}],"kv_transfer_params":{"remote_engine_id":"e"}}`))
	f.Add([]byte(`{"choices":[{"index":0,"text":"","disaggregated_params":{"request_type":"context_only","ctx_request_id":3}}]}`))
	f.Add([]byte(`{"error":{"message":"boom","type":"InternalServerError","code":500}}`))
	f.Add([]byte(`{"choices":[{"index":0,"text":"","token_ids":[5],"prompt_logprobs":[null,{"2":{"logprob":-0.5,"rank":2,"decoded_token":"b"},` +
		`"9":{"logprob":-0.1,"rank":1,"decoded_token":"x"}},{"3":{"logprob":-2,"rank":7}}],"finish_reason":"length"}]}`))
	tok, err := tokenizer.CL100K()
	if err != nil {
		f.Fatal(err)
	}
	tt := textTokens{tok: tok, ids: &pieceIDs{}}
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := ParseCompletion(b)
		if err != nil {
			return
		}
		for _, c := range resp.Choices {
			// Whatever the answer says, reading it as tokens must not panic.
			lps := logprobsOf(c.Logprobs, len(c.TokenIDs), 20)
			if len(lps) != len(c.TokenIDs) {
				t.Fatalf("%d logprobs for %d tokens", len(lps), len(c.TokenIDs))
			}
			// vLLM's prompt logprobs, read against a prompt of as many tokens as
			// they claim (ids 1, 2, 3, ...): accepted, one per token after the first,
			// alternatives ordered.
			prompt := make([]uint32, len(c.PromptLogprobs))
			for i := range prompt {
				prompt[i] = uint32(i + 1)
			}
			if plps, err := promptLogprobsOf(&CompletionResponse{Choices: []Choice{c}}, prompt, 5); err == nil {
				if len(plps) != max(len(prompt)-1, 0) {
					t.Fatalf("%d prompt logprobs for %d tokens", len(plps), len(prompt))
				}
				for _, lp := range plps {
					if len(lp.Top) > 5 || !slices.IsSortedFunc(lp.Top, func(a, b engine.Logprob) int { return cmp.Compare(b.Logprob, a.Logprob) }) {
						t.Fatalf("alternatives %+v", lp.Top)
					}
				}
			}
			// A chunk in text mode is at most one token, with the chunk's text.
			ids, texts := tt.chunk(c)
			if len(ids) != len(texts) || len(ids) > 1 || len(ids) == 1 && texts[0] != c.Text {
				t.Fatalf("chunk %q: tokens %v, texts %q", c.Text, ids, texts)
			}
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 3\n" +
		"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1024\"} 1.0\nvllm:kv_cache_usage_perc 0.5 1700000000\n"))
	f.Add([]byte("sglang:token_usage{model_name=\"a\\\"b\",dp=\"0\"} NaN\n"))
	f.Add([]byte("trtllm_kv_cache_max_blocks{x=\"}\"} +Inf\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		samples, err := ParseMetrics(b)
		if err != nil {
			return
		}
		l := LoadFrom(samples, LoadMetrics{Running: []string{"a"}, Waiting: []string{"b"}, KVUsage: []string{"c"},
			TotalBlocks: []string{"d"}, TotalBlocksLabel: "n"})
		if l.Running < 0 || l.Waiting < 0 || l.KVUsage > 1 || l.TotalBlocks < 0 {
			t.Fatalf("load %+v", l)
		}
	})
}

func FuzzEvents(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": comment\nevent: x\ndata: one\ndata: two\n\n\n\ndata:[DONE]"))
	f.Add([]byte("data: " + strings.Repeat("x", 100) + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev := newEvents(bytes.NewReader(b))
		for i := 0; ; i++ {
			if i > len(b) {
				t.Fatalf("%d events from %d bytes", i, len(b))
			}
			d, err := ev.next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errDone) && !strings.Contains(err.Error(), "too long") {
					t.Fatalf("next: %v", err)
				}
				return
			}
			if len(d) > len(b) {
				t.Fatalf("an event of %d bytes from %d", len(d), len(b))
			}
		}
	})
}
