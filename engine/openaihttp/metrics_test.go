package openaihttp_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// An exposition the way vLLM's Python client writes it: HELP and TYPE lines,
// a counter named with _total, an info series, an escaped label value, a
// timestamp, NaN, a histogram. Each series comes out as it was on the wire.
func TestParseMetrics(t *testing.T) {
	text := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="a\"b\\c\nd"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2 1700000000000
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0"} 900.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="1024"} 1.0
sglang:token_usage NaN
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.5"} 1
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 4
vllm:e2e_request_latency_seconds_sum 6.5
vllm:e2e_request_latency_seconds_count 4
`
	got, err := openaihttp.ParseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 || !math.IsNaN(got[0].Value) || got[0].Name != "sglang:token_usage" {
		t.Fatalf("samples %+v", got)
	}
	want := []openaihttp.Sample{
		{Name: "vllm:cache_config_info", Labels: map[string]string{"block_size": "16", "num_gpu_blocks": "1024"}, Value: 1},
		{Name: "vllm:e2e_request_latency_seconds_bucket", Labels: map[string]string{"le": "0.5"}, Value: 1},
		{Name: "vllm:e2e_request_latency_seconds_bucket", Labels: map[string]string{"le": "+Inf"}, Value: 4},
		{Name: "vllm:e2e_request_latency_seconds_sum", Labels: map[string]string{}, Value: 6.5},
		{Name: "vllm:e2e_request_latency_seconds_count", Labels: map[string]string{}, Value: 4},
		{Name: "vllm:num_requests_running", Labels: map[string]string{"engine": "0", "model_name": "a\"b\\c\nd"}, Value: 3},
		{Name: "vllm:num_requests_running", Labels: map[string]string{"engine": "1", "model_name": "m"}, Value: 2},
		{Name: "vllm:prefix_cache_queries_total", Labels: map[string]string{"engine": "0"}, Value: 900},
	}
	if !reflect.DeepEqual(got[1:], want) {
		t.Errorf("samples\n got %+v\nwant %+v", got[1:], want)
	}
	l := openaihttp.LoadFrom(got, openaihttp.LoadMetrics{Running: []string{"vllm:num_requests_running"},
		TotalBlocks: []string{"vllm:cache_config_info"}, TotalBlocksLabel: "num_gpu_blocks",
		PrefixQueries: []string{"vllm:prefix_cache_queries_total"}})
	if l.Running != 5 || l.TotalBlocks != 1024 || l.PrefixQueries != 900 {
		t.Errorf("load %+v", l)
	}
}

// A malformed exposition is an error that names the line.
func TestParseMetricsMalformed(t *testing.T) {
	for _, text := range []string{
		"a 1\nb{x=\"1\" 2\n",
		"a 1\nb{x=1} 2\n",
		"a 1\nb\n",
		"a 1\nb one\n",
	} {
		_, err := openaihttp.ParseMetrics([]byte(text))
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v", text, err)
		}
	}
}
