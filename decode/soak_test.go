package decode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/internal/testutil/soaktest"
	"github.com/tandem-serve/tandem/prefill"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// TestSoak is a bounded soak: many concurrent streams through a decode
// worker and a prefill worker served in-process over real HTTP/2, for a fixed time,
// while the prefill path is broken and mended over and over. It reports the
// requests that failed (goal 0: every fault must end in a fallback, never in an
// error to the client) and the KV blocks still held once the load stops (goal 0),
// and fails if either is not zero.
//
//	TANDEM_SOAK=1 go test ./decode -run '^TestSoak$' -v -timeout 10m
//
// Settings (environment):
//
//	TANDEM_SOAK_DURATION  how long requests are started (default 60s)
//	TANDEM_SOAK_STREAMS   concurrent streams (default 256)
//	TANDEM_SOAK_ENGINE    native (default, the pure-Go model) or sim (timing model)
//	TANDEM_SOAK_FAULTS    how long each state of the prefill path lasts (default 5s)
//
// The prefill path cycles through four states: healthy; through a proxy that cuts
// each connection after 6.25 blocks of KV (handoffs die mid-transfer); healthy; a worker
// that is down (handoffs fail before any KV). One stream in eight cancels at a
// random point. The decode policy is threshold at 32 tokens, so short prompts
// stay local while the rest go remote; a third of the prompts extend one of eight
// shared prefixes, so some handoffs skip blocks the decode worker holds.
func TestSoak(t *testing.T) {
	if os.Getenv("TANDEM_SOAK") != "1" {
		t.Skip("set TANDEM_SOAK=1 to run the soak test")
	}
	duration := soaktest.Duration(t, "TANDEM_SOAK_DURATION", time.Minute)
	faultPeriod := soaktest.Duration(t, "TANDEM_SOAK_FAULTS", 5*time.Second)
	streams := 256
	streams = soaktest.Count(t, "TANDEM_SOAK_STREAMS", streams)
	newEngine := soakEngine(t, os.Getenv("TANDEM_SOAK_ENGINE"))

	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last, after every server and engine is closed

	peng, deng := newEngine(2048), newEngine(8192)
	// Chunks of 4 blocks, and a cut after 6.25 blocks' worth of bytes, whatever the
	// engine's block size: a cut handoff of more than 4 blocks dies mid-transfer.
	bb := peng.Info().Layout.BlockBytes
	good := soakPrefill(t, peng, "p0", 4*bb)
	cut := grpcPrefillClient(t, cutProxy(t, good.addr, int64(bb*25/4)))
	dead := soakPrefill(t, newEngine(16), "dead", 4*bb)
	dead.stop()
	pf := &staticPrefillers{}
	pf.add("p0", good.client)
	params := decode.Params{Policy: decode.PolicyThreshold, ThresholdParams: decode.ThresholdParams{ShortPrefillThreshold: 32}}
	node := startDecode(t, deng, pf, params, 5*time.Second, 30*time.Second)

	// The faults: the one prefill worker discovery knows is, in turn, healthy, cut
	// mid-transfer, healthy, and down.
	states := []struct {
		name   string
		client handoff.Client
	}{{"healthy", good.client}, {"cut", cut}, {"healthy", good.client}, {"down", dead.client}}
	stopFaults := make(chan struct{})
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		tick := time.NewTicker(faultPeriod)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stopFaults:
				return
			case <-tick.C:
			}
			s := states[i%len(states)]
			pf.mu.Lock()
			pf.clients["p0"] = s.client
			pf.mu.Unlock()
		}
	}()

	prefixes := make([][]uint32, 8)
	for i := range prefixes {
		prefixes[i] = prompt(50000+i, 64)
	}
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		errs     = map[string]int{}
		tokens   atomic.Int64
		started  atomic.Int64
	)
	note := func(m map[string]int, key string) {
		mu.Lock()
		m[key]++
		mu.Unlock()
	}
	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for w := range streams {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for i := 0; time.Now().Before(end); i++ {
				n := started.Add(1)
				p := prompt(int(n)*131+w, 8+rng.IntN(240))
				if rng.IntN(3) == 0 {
					p = append(slices.Clone(prefixes[rng.IntN(len(prefixes))]), p[:1+rng.IntN(min(100, len(p)))]...)
				}
				req := request(fmt.Sprintf("soak-%d-%d", w, i), p, float32(rng.IntN(3))*0.5, rng.Uint64())
				req.MaxTokens = uint32(4 + rng.IntN(29))
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				cancelAt := -1
				if rng.IntN(8) == 0 {
					cancelAt = rng.IntN(int(req.MaxTokens) + 1)
				}
				r, err := soakGenerate(ctx, node, req, cancelAt, cancel)
				timedOut := ctx.Err() == context.DeadlineExceeded
				cancel()
				switch {
				case cancelAt >= 0:
					if err != nil && connect.CodeOf(err) != connect.CodeCanceled {
						note(errs, "cancelled stream ended with "+connect.CodeOf(err).String()+": "+err.Error())
					}
					note(outcomes, "cancelled by the client")
				case timedOut:
					note(errs, "no answer within 2 minutes")
				case err != nil:
					note(errs, connect.CodeOf(err).String()+": "+soaktest.Trim(err.Error()))
				case r.finish == decodev1.FinishReason_FINISH_REASON_UNSPECIFIED || r.usage.GetCompletionTokens() != uint32(len(r.tokens)) || len(r.tokens) == 0:
					note(errs, fmt.Sprintf("incomplete stream: %d tokens, finish %v, usage %v", len(r.tokens), r.finish, r.usage))
				default:
					tokens.Add(int64(len(r.tokens)))
					note(outcomes, r.decision.GetPath().Name()+" "+r.decision.GetReason())
				}
			}
		})
	}
	wg.Wait()
	close(stopFaults)
	<-faultsDone
	elapsed := time.Since(end.Add(-duration))

	// Leaked blocks: whatever is still active once nothing runs.
	leaked := map[string]engine.Stats{}
	for name, e := range map[string]engine.Engine{"decode": deng, "prefill": peng} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := e.Stats()
			if st.ActiveBlocks == 0 && st.Running == 0 && st.Waiting == 0 {
				break
			}
			if time.Now().After(deadline) {
				leaked[name] = st
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	lines, total, nerr := soaktest.Tally(outcomes, errs)
	leakedBlocks := 0
	for _, st := range leaked {
		leakedBlocks += st.ActiveBlocks
	}
	t.Logf("soak: %d streams, %s (%s until the last stream ended), engine %s, faults every %s",
		streams, duration, elapsed.Round(time.Millisecond), deng.Info().Engine, faultPeriod)
	t.Logf("soak: %d requests (%.1f/s), %d tokens (%.0f/s)", total, float64(total)/elapsed.Seconds(), tokens.Load(), float64(tokens.Load())/elapsed.Seconds())
	t.Logf("soak: outcomes:\n%s", strings.Join(lines, "\n"))
	t.Logf("soak: errors %d, leaked blocks %d (decode %+v, prefill %+v)", nerr, leakedBlocks, deng.Stats(), peng.Stats())
	if nerr != 0 {
		t.Errorf("%d requests failed; goal 0", nerr)
	}
	if len(leaked) != 0 {
		t.Errorf("blocks still active after the load: %v", leaked)
	}
}

// kvNode is a prefill worker's KV transfer port, as workers serve it, and a
// client dialled as decode workers dial it.
type kvNode struct {
	addr   string
	client handoff.Client
	stop   func() // ends Serve and waits for it; the test's cleanup calls it too
}

// soakPrefill serves a prefill service with the given chunk size on a KV transfer
// port (services/kvport), the path remote prefills take in a deployment.
func soakPrefill(t *testing.T, eng engine.Engine, id string, chunkBytes int) *kvNode {
	t.Helper()
	svc, err := prefill.New(prefill.Config{WorkerID: id, ChunkBytes: chunkBytes, MaxLease: 30 * time.Second}, eng, quietLog(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := serveKV(svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	conn := rpctest.Dial(t, addr, handoff.DialOptions()...)
	return &kvNode{addr: addr, client: handoff.GRPCClient(conn), stop: stop}
}

// soakGenerate runs req; if cancelAt >= 0 it calls cancel after that many token
// messages (0: right after the call).
func soakGenerate(ctx context.Context, node *decodeNode, req *decodev1.GenerateRequest, cancelAt int, cancel context.CancelFunc) (result, error) {
	if cancelAt == 0 {
		cancel()
	}
	stream, err := node.client.Generate(ctx, connect.NewRequest(req))
	if err != nil {
		return result{}, err
	}
	defer stream.Close()
	var r result
	msgs := 0
	for stream.Receive() {
		m := stream.Msg()
		r.tokens = append(r.tokens, m.GetTokenIds()...)
		if m.GetPrefill() != nil {
			r.decision = m.GetPrefill()
		}
		if m.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_UNSPECIFIED {
			r.finish, r.usage = m.GetFinishReason(), m.GetUsage()
		}
		if msgs++; msgs == cancelAt {
			cancel()
		}
	}
	return r, stream.Err()
}

// soakEngine returns a constructor of engines of the given kind and pool size.
// Both sides of a handoff must agree on the weights (native) or seed (sim).
func soakEngine(t *testing.T, kind string) func(blocks int) engine.Engine {
	return func(blocks int) engine.Engine {
		var e engine.Engine
		var err error
		switch kind {
		case "", "native":
			e, err = native.New(native.Config{Model: "tiny", Seed: 7, NumBlocks: blocks, Logger: quietLog()})
		case "sim":
			cfg := sim.DefaultConfig()
			cfg.NumBlocks = blocks
			e, err = sim.New(cfg)
		default:
			err = errors.New("TANDEM_SOAK_ENGINE: want native or sim")
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
}
