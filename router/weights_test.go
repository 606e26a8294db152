package router_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/router"
)

// A request names its model's fingerprint; workers serving other weights are never
// chosen, for decode or prefill, and with none left the error says why.
func TestRouteSkipsWorkersOfOtherWeights(t *testing.T) {
	a, b, p := decodeA, decodeB, prefillP
	a.Fingerprint, b.Fingerprint, p.Fingerprint = "fp-1", "fp-2", "fp-2"
	start(t, []router.Worker{a, b, p}, func(t *testing.T, _ *router.Router, c client) {
		for range 20 {
			resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 40, ModelFingerprint: "fp-1"})
			if id := resp.GetDecodeWorker().GetId(); id != a.ID {
				t.Fatalf("routed to %s, which serves other weights", id)
			}
			if len(resp.GetPrefillWorkers()) != 0 {
				t.Fatalf("prefill candidates %v serve other weights", resp.GetPrefillWorkers())
			}
			if fp := resp.GetDecodeWorker().GetModelFingerprint(); fp != "fp-1" {
				t.Fatalf("decode worker fingerprint %q", fp)
			}
		}
		resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 40, ModelFingerprint: "fp-2"})
		if resp.GetDecodeWorker().GetId() != b.ID || len(resp.GetPrefillWorkers()) != 1 {
			t.Fatalf("fp-2: %v", resp)
		}
		_, err := c.route(rpctest.Context(t), &routerv1.RouteRequest{PromptTokens: 40, ModelFingerprint: "fp-3"})
		if rpctest.Code(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "fingerprint fp-3") {
			t.Fatalf("no worker of fp-3: %v", err)
		}
	})
}
