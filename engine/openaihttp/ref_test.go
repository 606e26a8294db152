package openaihttp_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// field is one top-level field of a JSON object.
func field(t *testing.T, obj []byte, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	return m[key]
}

// Each engine's prefill leg sends the documented body, and its answer's
// parameters reach the decode leg as the engine expects them.
func TestDisaggLegs(t *testing.T) {
	req := engine.Request{ID: "req-d", Prompt: []uint32{5, 6, 7}, MaxTokens: 3, StopTokens: []uint32{99}}
	for _, c := range []struct {
		kind    fakeengine.Kind
		prefill string // the prefill leg's body
		check   func(t *testing.T, prefillResp, params, decodeBody []byte)
	}{
		{fakeengine.VLLM, `{"model":"fake-model","prompt":[5,6,7],"max_tokens":1,"temperature":0,"seed":0,"stream":false,"stop_token_ids":[99],"ignore_eos":true,"return_token_ids":true,` +
			`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,` +
			`"remote_host":null,"remote_port":null}}`,
			func(t *testing.T, _, params, decode []byte) {
				if !jsonEqual(t, field(t, decode, "kv_transfer_params"), params) {
					t.Errorf("decode leg's kv_transfer_params %s, want the prefill leg's %s verbatim", field(t, decode, "kv_transfer_params"), params)
				}
			}},
		{fakeengine.TRTLLM, `{"model":"fake-model","prompt":[5,6,7],"max_tokens":1,"temperature":0,"seed":0,"stream":false,"stop_token_ids":[99],"ignore_eos":true,"detokenize":false,` +
			`"disaggregated_params":{"request_type":"context_only"}}`,
			func(t *testing.T, _, params, decode []byte) {
				var want map[string]any
				_ = json.Unmarshal(params, &want)
				want["request_type"] = "generation_only"
				w, _ := json.Marshal(want)
				if !jsonEqual(t, field(t, decode, "disaggregated_params"), w) {
					t.Errorf("generation leg's disaggregated_params %s, want %s", field(t, decode, "disaggregated_params"), w)
				}
			}},
		{fakeengine.SGLang, "", func(t *testing.T, prefill, _, decode []byte) {
			for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"} {
				if p, d := field(t, prefill, k), field(t, decode, k); len(p) == 0 || string(p) != string(d) {
					t.Errorf("%s: prefill leg %s, decode leg %s", k, p, d)
				}
			}
			if string(field(t, prefill, "bootstrap_host")) != `"10.0.0.9"` || string(field(t, prefill, "bootstrap_port")) != "8998" {
				t.Errorf("prefill leg %s", prefill)
			}
		}},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			pf := (&fakeengine.Server{Kind: c.kind, TokenIDs: true}).Start(t)
			df := (&fakeengine.Server{Kind: c.kind, TokenIDs: true}).Start(t)
			pe, de := connect(t, pf, "token_ids"), connect(t, df, "token_ids")
			exp, err := pe.ExportRef(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			s, err := de.ImportRef(t.Context(), req, exp.Params())
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.Drain(t, t.Context(), s); !slices.Equal(got, []uint32{11, 12, 13}) {
				t.Errorf("tokens %v", got)
			}
			if err := exp.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			pr, dr := pf.Completions(), df.Completions()
			if len(pr) != 1 || len(dr) != 1 || pr[0].RequestID != "req-d" || dr[0].RequestID != "req-d" {
				t.Fatalf("prefill legs %d, decode legs %d; the same X-Request-Id on both", len(pr), len(dr))
			}
			if c.prefill != "" && string(pr[0].Body) != c.prefill {
				t.Errorf("prefill leg\n%s\nwant\n%s", pr[0].Body, c.prefill)
			}
			c.check(t, pr[0].Body, exp.Params(), dr[0].Body)
		})
	}
}

// A prefill leg that answers without parameters, or fails, is an error the
// ladder reads; the decode engine is never asked.
func TestDisaggPrefillFaults(t *testing.T) {
	for _, k := range []fakeengine.Kind{fakeengine.VLLM, fakeengine.TRTLLM} {
		pf := (&fakeengine.Server{Kind: k, TokenIDs: true}).Start(t)
		pe := connect(t, pf, "token_ids")
		pf.SetPrefillFault(fakeengine.PrefillNoParams)
		if _, err := pe.ExportRef(t.Context(), engine.Request{ID: "r", Prompt: []uint32{1}}); !errors.Is(err, engine.ErrNoTransferParams) {
			t.Errorf("%s without params: %v", k, err)
		}
		pf.SetPrefillFault(fakeengine.Prefill503)
		if _, err := pe.ExportRef(t.Context(), engine.Request{ID: "r", Prompt: []uint32{1}}); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s 503: %v", k, err)
		}
	}
}
