package enginecheck_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tandem-serve/tandem/engine/enginecheck"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/engine/sglang"
	"github.com/tandem-serve/tandem/engine/trtllm"
	"github.com/tandem-serve/tandem/engine/vllm"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

func dialect(k fakeengine.Kind) openaihttp.Dialect {
	switch k {
	case fakeengine.TRTLLM:
		return trtllm.Dialect()
	case fakeengine.SGLang:
		return sglang.Dialect(sglang.Bootstrap{Host: "127.0.0.1", Port: 8998})
	}
	return vllm.Dialect()
}

func run(t *testing.T, cfg enginecheck.Config) *enginecheck.Report {
	t.Helper()
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	cfg.EventWindow = 300 * time.Millisecond
	r, err := enginecheck.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	return r
}

func item(t *testing.T, r *enginecheck.Report, check string) enginecheck.Item {
	t.Helper()
	for _, it := range r.Items {
		if it.Check == check {
			return it
		}
	}
	t.Fatalf("no %q in the report: %+v", check, r.Items)
	return enginecheck.Item{}
}

func stored(size int) fakeengine.StoredBlocks {
	toks := make([]uint32, size)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	return fakeengine.StoredBlocks{Hashes: []uint64{7}, TokenIDs: toks, BlockSize: size}
}

// A vLLM engine with everything: the report passes, and names each thing tandem
// will use.
func TestGoodEngine(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, TotalBlocks: 900}).Start(t)
	pub := fakeengine.NewPublisher(t, "kv", fakeengine.MapEncoding)
	pub.Stored(stored(16))
	r := run(t, enginecheck.Config{URL: f.URL(), Dialect: vllm.Dialect(), Prefill: true,
		KVEvents: kvevents.SubscriberConfig{Endpoint: pub.Endpoint, ReplayEndpoint: pub.ReplayEndpoint, Topic: "kv"}})
	if !r.OK {
		t.Fatalf("a good engine failed: %v", r.Failed())
	}
	for _, it := range r.Items {
		if it.Status != enginecheck.OK {
			t.Errorf("%s: %s %s", it.Check, it.Status, it.Found)
		}
	}
	if r.Model != "fake-model" || r.ContextLength != 4096 || r.TokenMode != "token_ids" {
		t.Errorf("model %q context %d token mode %q", r.Model, r.ContextLength, r.TokenMode)
	}
	if !strings.Contains(string(r.TransferParams), `"remote_engine_id":"fake-prefill-engine"`) {
		t.Errorf("transfer params %s", r.TransferParams)
	}
	if r.Metrics["running"] != "vllm:num_requests_running" || r.Metrics["kv blocks"] != "vllm:cache_config_info" {
		t.Errorf("metrics %v", r.Metrics)
	}
	ev := r.KVEvents
	if ev == nil || !ev.ReplayAnswers || ev.Replayed != 1 || strings.Join(ev.Encodings, ",") != "map" || len(ev.BlockSizes) != 1 {
		t.Errorf("kv events %+v", ev)
	}
	// The JSON a tool reads says the same.
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back["ok"] != true || back["token_mode"] != "token_ids" {
		t.Errorf("json %s: %v", buf.String(), err)
	}
}

// Live events, without a replay socket, in the array encoding: the encoding is
// named and the replay is reported as not configured.
func TestLiveEventsArrayEncoding(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.SGLang, TokenIDs: true}).Start(t)
	pub := fakeengine.NewPublisher(t, "", fakeengine.ArrayEncoding)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				pub.Stored(stored(16))
			}
		}
	}()
	r := run(t, enginecheck.Config{URL: f.URL(), Dialect: dialect(fakeengine.SGLang), KVEvents: kvevents.SubscriberConfig{Endpoint: pub.Endpoint}})
	if !r.OK || r.KVEvents == nil || r.KVEvents.Live == 0 || strings.Join(r.KVEvents.Encodings, ",") != "array" {
		t.Fatalf("ok %v, events %+v", r.OK, r.KVEvents)
	}
	if it := item(t, r, "kv events replay"); it.Status != enginecheck.Skip {
		t.Errorf("replay %+v", it)
	}
	if it := item(t, r, "prefill leg"); it.Status != enginecheck.Skip {
		t.Errorf("sglang prefill leg %+v", it)
	}
}

// An engine that streams only text is usable: text mode is a warning.
func TestTextOnlyEngine(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM}).Start(t)
	r := run(t, enginecheck.Config{URL: f.URL(), Dialect: vllm.Dialect()})
	if !r.OK || r.TokenMode != "text" || item(t, r, "token ids").Status != enginecheck.Warn {
		t.Fatalf("ok %v token mode %q %+v", r.OK, r.TokenMode, item(t, r, "token ids"))
	}
}

// A prefill leg without transfer parameters warns, and fails for an engine
// meant for a prefill worker.
func TestPrefillLegWithoutParams(t *testing.T) {
	for _, kind := range []fakeengine.Kind{fakeengine.VLLM, fakeengine.TRTLLM} {
		f := (&fakeengine.Server{Kind: kind, TokenIDs: true}).Start(t)
		f.SetPrefillFault(fakeengine.PrefillNoParams)
		cfg := enginecheck.Config{URL: f.URL(), Dialect: dialect(kind), ContextLength: 2048}
		r := run(t, cfg)
		if it := item(t, r, "prefill leg"); !r.OK || it.Status != enginecheck.Warn || !strings.Contains(it.Found, "no KV transfer parameters") {
			t.Errorf("%s: ok %v, %+v", kind, r.OK, it)
		}
		cfg.Prefill = true
		r = run(t, cfg)
		if it := item(t, r, "prefill leg"); r.OK || it.Status != enginecheck.Fail {
			t.Errorf("%s, for a prefill worker: ok %v, %+v", kind, r.OK, it)
		}
	}
}

// A block size other than the engine's fails, whether the events or the metrics
// say it.
func TestBlockSizeMismatch(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	pub := fakeengine.NewPublisher(t, "kv", fakeengine.ArrayEncoding)
	pub.Stored(stored(32))
	r := run(t, enginecheck.Config{URL: f.URL(), Dialect: vllm.Dialect(), BlockSize: 32,
		KVEvents: kvevents.SubscriberConfig{Endpoint: pub.Endpoint, ReplayEndpoint: pub.ReplayEndpoint, Topic: "kv"}})
	// The fake's metrics say block_size="16"; its events say 32.
	if it := item(t, r, "metrics block size"); r.OK || it.Status != enginecheck.Fail || !strings.Contains(it.Found, "--block-size is 32") {
		t.Errorf("metrics block size: ok %v %+v", r.OK, it)
	}
	if it := item(t, r, "events block size"); it.Status != enginecheck.OK {
		t.Errorf("events block size %+v", it)
	}
	r = run(t, enginecheck.Config{URL: f.URL(), Dialect: vllm.Dialect(), BlockSize: 16,
		KVEvents: kvevents.SubscriberConfig{Endpoint: pub.Endpoint, ReplayEndpoint: pub.ReplayEndpoint, Topic: "kv"}})
	if it := item(t, r, "events block size"); r.OK || it.Status != enginecheck.Fail || !strings.Contains(it.Found, "events carry [32]") {
		t.Errorf("events block size: ok %v %+v", r.OK, it)
	}
}

// No server, no context length, no health: each named.
func TestBrokenEngines(t *testing.T) {
	gone := httptest.NewServer(nil)
	url := gone.URL
	gone.Close()
	r := run(t, enginecheck.Config{URL: url, Dialect: vllm.Dialect()})
	if it := item(t, r, "server"); r.OK || it.Status != enginecheck.Fail || !strings.Contains(it.Found, url) {
		t.Errorf("a server that is down: ok %v %+v", r.OK, it)
	}

	f := (&fakeengine.Server{Kind: fakeengine.TRTLLM, TokenIDs: true}).Start(t)
	f.SetHealthy(false)
	r = run(t, enginecheck.Config{URL: f.URL(), Dialect: trtllm.Dialect()})
	if it := item(t, r, "context length"); r.OK || it.Status != enginecheck.Fail || !strings.Contains(it.Detail, "--max-model-len") {
		t.Errorf("trtllm without --max-model-len: ok %v %+v", r.OK, it)
	}
	if it := item(t, r, "health"); it.Status != enginecheck.Fail || !strings.Contains(it.Found, "503") {
		t.Errorf("health %+v", it)
	}

	r = run(t, enginecheck.Config{URL: f.URL(), Dialect: trtllm.Dialect(), Model: "other", ContextLength: 100})
	if it := item(t, r, "model"); r.OK || it.Status != enginecheck.Fail || !strings.Contains(it.Found, `not "other"`) {
		t.Errorf("a model not served: ok %v %+v", r.OK, it)
	}
}

// A replay socket that answers (topic, sequence, batch), as llm-d's simulator
// and TensorRT-LLM do, answers: its batches are read and the form is named.
func TestReplayWithTopic(t *testing.T) {
	pub := fakeengine.NewPublisher(t, "kv", fakeengine.ArrayEncoding)
	pub.Stored(stored(16))
	router := zmq4.NewRouter(t.Context())
	t.Cleanup(func() { _ = router.Close() })
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		// The batch the publisher holds, taken from its own replay socket.
		d := zmq4.NewDealer(t.Context())
		defer d.Close()
		if d.Dial(pub.ReplayEndpoint) != nil || d.SendMulti(zmq4.NewMsgFrom([]byte{}, make([]byte, 8))) != nil {
			return
		}
		held, err := d.Recv()
		if err != nil {
			return
		}
		req, err := router.Recv()
		if err != nil {
			return
		}
		id, f := req.Frames[0], held.Frames[len(held.Frames)-2:]
		_ = router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte("kv"), f[0], f[1]))
		_ = router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte{}, []byte{255, 255, 255, 255, 255, 255, 255, 255}, []byte{}))
	}()
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	r := run(t, enginecheck.Config{URL: f.URL(), Dialect: vllm.Dialect(),
		KVEvents: kvevents.SubscriberConfig{Endpoint: pub.Endpoint, ReplayEndpoint: "tcp://" + router.Addr().String(), Topic: "kv"}})
	if it := item(t, r, "kv events replay"); it.Status != enginecheck.OK || !strings.Contains(it.Found, "(topic, sequence, batch)") ||
		r.KVEvents.Replayed != 1 {
		t.Errorf("%+v, events %+v", it, r.KVEvents)
	}
}
