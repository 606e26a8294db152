package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// 'tandem engine check' exits 0 for a good engine, prints the table or the
// JSON, takes the worker's TANDEM_* variables, and exits non-zero naming what
// broke.
func TestEngineCheckCommand(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"engine", "check", "--engine", "vllm"}, envOf(map[string]string{"TANDEM_ENGINE_URL": f.URL()}), &out, &errOut)
	if err != nil || !strings.Contains(out.String(), "token ids") || !strings.Contains(out.String(), "OK: a tandem worker can serve") {
		t.Fatalf("exit %d (%v):\n%s%s", exitOf(err), err, out.String(), errOut.String())
	}

	trt := (&fakeengine.Server{Kind: fakeengine.TRTLLM, TokenIDs: true}).Start(t)
	out.Reset()
	err = run(t.Context(), []string{"engine", "check", "--engine", "trtllm", "--engine-url", trt.URL(), "--json"}, envOf(nil), &out, &errOut)
	var r struct {
		OK    bool `json:"ok"`
		Items []struct{ Check, Status string }
	}
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil || r.OK || exitOf(err) == 0 || !strings.Contains(err.Error(), "context length") {
		t.Fatalf("trtllm without --max-model-len: exit %d (%v), json %v:\n%s", exitOf(err), err, jerr, out.String())
	}

	gone := httptest.NewServer(nil)
	gone.Close()
	out.Reset()
	err = run(t.Context(), []string{"engine", "check", "--engine", "sglang", "--engine-url", gone.URL}, envOf(nil), &out, &errOut)
	if exitOf(err) == 0 || !strings.Contains(out.String(), gone.URL) || !strings.Contains(err.Error(), "server") {
		t.Errorf("a server that is down: exit %d (%v):\n%s", exitOf(err), err, out.String())
	}

	err = run(t.Context(), []string{"engine", "check", "--engine", "native", "--engine-url", f.URL()}, envOf(nil), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `--engine "native"`) {
		t.Errorf("a native engine: %v", err)
	}
}
