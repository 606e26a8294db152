package handoff

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil"
)

// FuzzHandoff drives Fetch, the receiving half of a handoff, with a fake prefill
// worker whose stream is a program read from the fuzz input, against a real sim
// engine. Each op of the program is one thing a prefill worker or the network can
// do: a header, a chunk, a trailer (each either as the real Sender sends it or with
// one field damaged), an empty message, an error status, an early EOF, a stall, or
// the client going away. The healthy messages are the real Sender's, over the
// sim's real KV (a second sim engine's Prefill), so the fuzzer spends its time near
// valid handoffs rather than on random bytes the first check refuses. Every input
// also runs both halves together: the real Sender, at a chunk size the input picks,
// over an in-process pipe into Fetch, which must import exactly the sent KV.
//
// Input layout: promptLen picks the prompt (1..160 tokens, up to 10 blocks),
// cached how many leading blocks the receiving engine already holds (its high bit
// makes the caller claim more than it holds), poolBlocks the receiving engine's
// pool size (8..263 blocks: small pools make Import fail), program the ops.
//
//	go test ./handoff -run '^$' -fuzz FuzzHandoff -fuzztime 60s

// reasons are the labels a failure may have.
var reasons = []string{
	ReasonProtocol, ReasonLayout, ReasonImportFailed, ReasonImportNoBlocks, ReasonBlockGap, ReasonCRC,
	ReasonBeforeKV, ReasonMidTransfer, ReasonTimeout,
}

// handoffSeeds are the committed seeds, each with the outcome it must have: the
// reason Fetch gives, or "" for a successful import.
var handoffSeeds = []struct {
	name                          string
	promptLen, cached, poolBlocks uint8
	program                       []byte
	reason                        string
}{
	{"complete in chunks of 2", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoChunk, 1, hoChunk, 255, hoTrailer}, ""},
	{"complete with 2 blocks held", 100, 2, 120, []byte{hoHeader, hoChunk, 255, hoTrailer}, ""},
	{"one block", 0, 0, 120, []byte{hoHeader, hoChunk, 0, hoTrailer}, ""},
	{"bit flipped on the wire", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoBadChunk, 1, 3, 5, 2, hoChunk, 255, hoTrailer}, "crc_mismatch"},
	{"bit flipped before the CRC", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoBadChunk, 1, 4, 9, 1, hoChunk, 255, hoTrailer}, "import_failed"},
	{"block out of place", 70, 0, 120, []byte{hoHeader, hoBadChunk, 1, 6, hoChunk, 255, hoTrailer}, "import_failed"},
	{"chunk at the wrong block", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoBadChunk, 1, 0, 9, hoTrailer}, "block_gap"},
	{"chunk a byte short", 70, 0, 120, []byte{hoHeader, hoBadChunk, 0, 2, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"trailer miscounts", 70, 0, 120, []byte{hoHeader, hoChunk, 255, hoBadTrailer, 3}, "block_gap"},
	{"trailer early", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoTrailer}, "block_gap"},
	{"header skips too much", 70, 0, 120, []byte{hoBadHeader, 5, 1, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"header from other weights", 70, 0, 120, []byte{hoBadHeader, 2, hoChunk, 255, hoTrailer}, "layout_mismatch"},
	{"first token outside vocabulary", 70, 0, 120, []byte{hoBadHeader, 6, 0xff, 0xff, 0xff, 0xff, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"chunk past the end", 70, 0, 120, []byte{hoHeader, hoChunk, 255, hoChunk, 0, hoTrailer}, "protocol_error"},
	{"two headers", 70, 0, 120, []byte{hoHeader, hoHeader, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"empty message", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoEmpty, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"chunk first", 70, 0, 120, []byte{hoChunk, 255, hoTrailer}, "protocol_error"},
	{"caller claims blocks it lacks", 70, 0x81, 120, []byte{hoHeader, hoChunk, 255, hoTrailer}, "import_failed"},
	{"pool too small", 150, 0, 0, []byte{hoHeader, hoChunk, 255, hoTrailer}, "import_no_blocks"},
	{"worker down", 70, 0, 120, []byte{hoCallError}, "remote_error_before_kv"},
	{"error before the header", 70, 0, 120, []byte{hoError, 0}, "remote_error_before_kv"},
	{"error before any block", 70, 0, 120, []byte{hoHeader, hoError, 1}, "remote_error_before_kv"},
	{"error mid-transfer", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoError, 1}, "remote_error_mid_transfer"},
	{"EOF mid-transfer", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoEOF}, "remote_error_mid_transfer"},
	{"stall", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoStall}, "remote_timeout"},
	{"client leaves", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoCancel}, "cancelled"},
	{"nothing at all", 70, 0, 120, []byte{}, "remote_error_before_kv"},
}

// The seeds exercise every outcome; each must have the one it was written for, so
// a change in the checks that the fuzz properties allow (a different reason, a
// retry allowed or not) is still caught.
func TestHandoffSeeds(t *testing.T) {
	pe := handoffPrefillEngine(t)
	for _, sd := range handoffSeeds {
		t.Run(sd.name, func(t *testing.T) {
			out := runHandoffCase(t, pe, sd.promptLen, sd.cached, sd.poolBlocks, sd.program)
			var re *Error
			got := ""
			switch {
			case errors.As(out.err, &re):
				got = re.Reason
			case errors.Is(out.err, context.Canceled):
				got = "cancelled"
			case out.err != nil:
				got = out.err.Error()
			}
			if got != sd.reason {
				t.Errorf("outcome %q (%v), want %q", got, out.err, sd.reason)
			}
		})
	}
}

func handoffPrefillEngine(tb testing.TB) *sim.Engine {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	pe, err := sim.New(cfg) // the sending side, for the real KV bytes
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = pe.Close() })
	return pe
}

// FuzzHandoff: see the top of this file; runHandoffCase and runPair say what each
// input must satisfy.
func FuzzHandoff(f *testing.F) {
	for _, sd := range handoffSeeds {
		f.Add(sd.promptLen, sd.cached, sd.poolBlocks, sd.program)
	}
	pe := handoffPrefillEngine(f)
	f.Fuzz(func(t *testing.T, promptLen, cached, poolBlocks uint8, program []byte) {
		runHandoffCase(t, pe, promptLen, cached, poolBlocks, program)
		runPair(t, pe, promptLen, cached, poolBlocks, program)
	})
}

// handoffOutcome is what Fetch returned.
type handoffOutcome struct {
	st  engine.Stream
	res *Result
	err error
}

// receiver is a fresh sim engine of pool blocks holding the first warm blocks of
// prompt, and how many it really holds.
func receiver(t *testing.T, hc *handoffCase) (*sim.Engine, int) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale, cfg.NumBlocks = 0, hc.pool
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	bs := eng.Info().Layout.BlockSize
	if hc.warm > 0 {
		exp, err := eng.Prefill(context.Background(), engine.Request{ID: "warm", Prompt: hc.prompt[:hc.warm*bs], MaxTokens: 1})
		if err == nil {
			exp.Release()
		}
	}
	return eng, eng.CachedPrefix(hc.prompt) / bs
}

// fetch runs Fetch against client, failing the test if it hangs.
func fetch(t *testing.T, ctx context.Context, client Client, eng *sim.Engine, req engine.Request, skip int, deadline time.Duration) handoffOutcome {
	t.Helper()
	done := make(chan handoffOutcome, 1)
	go func() {
		st, res, err := Fetch{Worker: "fuzz-prefill", Skip: skip, Deadline: deadline}.Run(ctx, client, eng, req)
		done <- handoffOutcome{st, res, err}
	}()
	select {
	case out := <-done:
		return out
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("Fetch hung:\n%s", buf[:runtime.Stack(buf, true)])
	}
	return handoffOutcome{}
}

// checkFailure checks that a failed fetch says why in a way the fallback ladder
// reads, and returned nothing else.
func checkFailure(t *testing.T, out handoffOutcome, cancelled bool) {
	t.Helper()
	var re *Error
	switch {
	case errors.As(out.err, &re):
		if !slices.Contains(reasons, re.Reason) || re.Err == nil {
			t.Errorf("handoff error %q with reason %q", out.err, re.Reason)
		}
	case cancelled && errors.Is(out.err, context.Canceled):
		// The client went away: not the prefill worker's fault, no fallback.
	default:
		t.Errorf("error %v (%T) is not a *handoff.Error", out.err, out.err)
	}
	if out.st != nil || out.res != nil {
		t.Errorf("failure %v also returned a stream or result", out.err)
	}
}

// checkIdle checks that eng holds nothing after a handoff, whatever its outcome.
func checkIdle(t *testing.T, eng *sim.Engine, err error) {
	t.Helper()
	if st := eng.Stats(); st.ActiveBlocks != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after the handoff (err %v) the engine holds %d active blocks, %d running, %d waiting", err, st.ActiveBlocks, st.Running, st.Waiting)
	}
}

// runHandoffCase plays one input's program against a fresh sim engine and checks
// everything the receiver promises: no panic or hang; a success only for a
// correct handoff, with a stream that yields the header's first token; a failure
// as an *Error with a known reason; no block left active either way; and the
// stream's context cancelled, so the prefill worker frees its KV too.
func runHandoffCase(t *testing.T, pe *sim.Engine, promptLen, cached, poolBlocks uint8, program []byte) handoffOutcome {
	t.Helper()
	hc := decodeHandoffCase(t, pe, promptLen, cached, poolBlocks, program)
	eng, held := receiver(t, hc)
	info := eng.Info()
	reqCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := &fakePrefillClient{hc: hc, reqCancel: cancel}
	deadline := 10 * time.Second
	if hc.hasStall {
		deadline = 20 * time.Millisecond
	}
	req := engine.Request{ID: "fuzz", Prompt: hc.prompt, MaxTokens: 4}
	out := fetch(t, reqCtx, client, eng, req, hc.skip, deadline)
	if client.stream != nil && client.stream.ctx.Err() == nil {
		t.Errorf("the stream's context is still live after Fetch returned: the prefill worker keeps its KV")
	}
	want, why := hc.expect(info, held)
	if out.err == nil {
		if out.st == nil || out.res == nil {
			t.Fatalf("success without a stream (%v) or result (%v)", out.st, out.res)
		}
		if !want {
			t.Errorf("accepted a handoff the protocol refuses (%s)", why)
		}
		n := len(hc.blocks)
		if r := out.res; r.Blocks != n-r.Skipped || r.Bytes != r.Blocks*info.Layout.BlockBytes || r.Skipped > hc.skip {
			t.Errorf("handoff of %d blocks, %d bytes, %d skipped; prompt has %d blocks, caller held %d", r.Blocks, r.Bytes, r.Skipped, n, hc.skip)
		}
		toks := testutil.Drain(t, reqCtx, out.st)
		first := hc.steps[0].msg.GetHeader().GetFirstToken()
		if len(toks) != req.MaxTokens || toks[0] != first {
			t.Errorf("imported stream yields %v; want %d tokens starting with the header's %d", toks, req.MaxTokens, first)
		}
	} else {
		checkFailure(t, out, hc.hasCancel && reqCtx.Err() != nil)
		if want && hc.pool >= 64 { // 64 blocks hold any prompt here with room to spare
			t.Errorf("refused a correct handoff: %v", out.err)
		}
	}
	checkIdle(t, eng, out.err)
	return out
}

// runPair runs both halves together on one input: the real Sender, in chunks of
// 1 to 4 blocks as the program's length picks, over an in-process pipe into
// Fetch. Unless the caller claims blocks it lacks or its pool is too small, the
// handoff must succeed and decode from the Sender's first token; either way no
// block may stay active on either side.
func runPair(t *testing.T, pe *sim.Engine, promptLen, cached, poolBlocks uint8, program []byte) {
	t.Helper()
	hc := decodeHandoffCase(t, pe, promptLen, cached, poolBlocks, nil)
	eng, held := receiver(t, hc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chunkBlocks := 1 + len(program)%4
	p := &pipe{eng: pe, chunkBytes: chunkBlocks * pe.Info().Layout.BlockBytes, worker: "fuzz-prefill"}
	req := engine.Request{ID: "fuzz-pair", Prompt: hc.prompt, MaxTokens: 4}
	out := fetch(t, ctx, p, eng, req, hc.skip, 10*time.Second)
	n := len(hc.blocks)
	skipped := min(hc.skip, n-1)
	if out.err != nil {
		checkFailure(t, out, false)
		if skipped <= held && hc.pool >= 64 {
			t.Errorf("Sender to Fetch, %d blocks, %d held, %d a chunk: %v", n, held, chunkBlocks, out.err)
		}
	} else {
		if skipped > held {
			t.Errorf("imported %d blocks on top of %d the engine does not hold", n-skipped, skipped-held)
		}
		if r := out.res; r.Skipped != skipped || r.Blocks != n-skipped || r.Bytes != r.Blocks*hc.layout.BlockBytes {
			t.Errorf("moved %d blocks (%d bytes) skipping %d; want %d skipping %d", r.Blocks, r.Bytes, r.Skipped, n-skipped, skipped)
		}
		first := hc.sent[0].GetHeader().GetFirstToken()
		if toks := testutil.Drain(t, ctx, out.st); len(toks) != req.MaxTokens || toks[0] != first {
			t.Errorf("imported stream yields %v; want %d tokens starting with the Sender's %d", toks, req.MaxTokens, first)
		}
	}
	p.wait()
	checkIdle(t, eng, out.err)
	if st := pe.Stats(); st.ActiveBlocks != 0 {
		t.Errorf("the sending engine holds %d active blocks after the handoff (err %v)", st.ActiveBlocks, out.err)
	}
}
