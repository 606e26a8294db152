package decode_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/poolengine"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// KV handoff throughput, end to end from the prefill worker's block pool into the
// decode worker's: the real prefill.Service (Connect handler, h2c), a grpc-go
// client, and the real decode.Service.Generate with policy always-remote and
// max_tokens 1, whose only token is the one carried in the header. docs/BENCHMARKS.md
// gives the command and its figures.
//
//	go test -run '^$' -bench 'Handoff$|RawTCP' -benchtime 20x -count 3 ./decode/
//	go test -run '^$' -bench HandoffTuning -benchtime 15x ./decode/

// handoffChunkBytes is the chunk size a prefill worker sends.
var handoffChunkBytes = prefill.DefaultConfig().ChunkBytes

var handoffTokens = []int{1024, 4096, 16384, 32768}

// smallLayout is the native small model's KV layout, fingerprint included, taken from
// a real engine so that a fake pool of the same shape cannot drift from it.
func smallLayout(tb testing.TB) engine.Layout {
	tb.Helper()
	e, err := native.New(native.Config{Model: "small", Seed: 7, NumBlocks: 1, Logger: quietLog()})
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()
	return e.Info().Layout
}

// handoffRig is one prefill worker and one decode worker over loopback HTTP/2.
type handoffRig struct {
	decode   decodev1connect.DecodeServiceClient
	registry *prometheus.Registry // the decode worker's metrics
	close    func()
}

// startHandoffRig serves pe as a prefill worker with the given chunk size and de as
// an always-remote decode worker. With kvPort, Prefill is served on a KV transfer
// port and dialled with its options, as workers do; otherwise by the Connect handler
// of the main port, dialled with grpc-go's defaults. dialOpts come last.
func startHandoffRig(tb testing.TB, pe, de engine.Engine, chunkBytes int, kvPort bool, dialOpts ...grpc.DialOption) *handoffRig {
	tb.Helper()
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	fail := func(err error) {
		closeAll()
		tb.Fatal(err)
	}
	psvc, err := prefill.New(prefill.Config{WorkerID: "p0", ChunkBytes: chunkBytes, MaxLease: time.Minute}, pe, quietLog(), prometheus.NewRegistry())
	if err != nil {
		fail(err)
	}
	var addr string
	if kvPort {
		// As a prefill worker serves it (services/workersvc): the KV transfer port.
		kvAddr, stop, err := serveKV(psvc)
		if err != nil {
			fail(err)
		}
		closers = append(closers, stop)
		addr = kvAddr
		dialOpts = append(handoff.DialOptions(), dialOpts...)
	} else {
		mux := http.NewServeMux()
		mux.Handle(prefillv1connect.NewPrefillServiceHandler(psvc))
		psrv := rpctest.NewServer(tb, mux)
		closers = append(closers, psrv.Close)
		addr = psrv.Listener.Addr().String()
	}
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		fail(err)
	}
	closers = append(closers, func() { cc.Close() })
	pf := &staticPrefillers{}
	pf.add("p0", handoff.GRPCClient(cc))
	reg := prometheus.NewRegistry()
	dsvc, err := decode.New(decode.Config{
		WorkerID: "d0", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: decode.Params{Policy: decode.PolicyAlwaysRemote},
		MinRemoteDeadline: time.Minute, MaxRemoteDeadline: time.Minute,
	}, de, pf, quietLog(), reg)
	if err != nil {
		fail(err)
	}
	dmux := http.NewServeMux()
	dmux.Handle(decodev1connect.NewDecodeServiceHandler(dsvc))
	dsrv := rpctest.NewServer(tb, dmux)
	closers = append(closers, dsrv.Close)
	return &handoffRig{
		decode:   decodev1connect.NewDecodeServiceClient(rpctest.Client(tb), dsrv.URL, connect.WithGRPC()),
		registry: reg,
		close:    closeAll,
	}
}

// handoff runs one always-remote Generate of p with max_tokens 1 and returns the
// KV bytes it moved; anything but a clean remote handoff fails the benchmark.
func (r *handoffRig) handoff(tb testing.TB, id string, p []uint32) int {
	stream, err := r.decode.Generate(context.Background(), connect.NewRequest(&decodev1.GenerateRequest{
		RequestId: id, PromptTokenIds: p, MaxTokens: 1, PrefillWorkers: []*decodev1.PrefillCandidate{{WorkerId: "p0"}},
	}))
	if err != nil {
		tb.Fatal(err)
	}
	defer stream.Close()
	var d *decodev1.PrefillDecision
	tokens := 0
	for stream.Receive() {
		tokens += len(stream.Msg().GetTokenIds())
		if stream.Msg().GetPrefill() != nil {
			d = stream.Msg().GetPrefill()
		}
	}
	if err := stream.Err(); err != nil {
		tb.Fatal(err)
	}
	if d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || tokens != 1 {
		tb.Fatalf("%s: path %v (%s) with %d tokens, want a remote handoff and 1 token", id, d.GetPath(), d.GetDetail(), tokens)
	}
	return int(d.GetHandoffBytes())
}

// histSum reads the sum of a histogram from reg.
func histSum(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	tb.Fatalf("no metric %s", name)
	return 0
}

// runHandoff times b.N handoffs of p and reports GB/s end to end (the Generate call
// as the client sees it) and GB/s of the transfer alone (first chunk to trailer, as
// the decode worker measures it for its estimator).
func runHandoff(b *testing.B, r *handoffRig, p []uint32, wantBytes int) {
	if got := r.handoff(b, "warm", p); got != wantBytes {
		b.Fatalf("handoff moved %d bytes, want %d", got, wantBytes)
	}
	before := histSum(b, r.registry, "tandem_handoff_seconds")
	b.SetBytes(int64(wantBytes))
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for i := range b.N {
		r.handoff(b, fmt.Sprintf("h%d", i), p)
	}
	wall := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
	transfer := histSum(b, r.registry, "tandem_handoff_seconds") - before
	total := float64(wantBytes) * float64(b.N)
	b.ReportMetric(total/wall.Seconds()/1e9, "GB/s")
	b.ReportMetric(total/transfer/1e9, "xfer-GB/s")
	b.ReportMetric(float64(wall.Microseconds())/1e3/float64(b.N), "ms/handoff")
	b.ReportMetric(0, "ns/op") // ms/handoff says it in a unit one can read
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func windowOpts(window int) []grpc.DialOption {
	if window == 0 {
		return nil
	}
	return []grpc.DialOption{grpc.WithInitialWindowSize(int32(window)), grpc.WithInitialConnWindowSize(int32(window))}
}

// BenchmarkHandoff moves a prompt's KV from a prefill worker's pool into a decode
// worker's. "kvport" is the path workers use, the prefill worker's KV transfer
// port (services/kvport); "mainport" is Prefill on the main port's Connect handler
// (net/http), kept for comparison. "pool" feeds it from blocks already cached in a
// pool of the small model's layout (no compute on either side beyond the copies an
// engine makes); "native-small" uses real native small engines, the prompt already
// in the prefill engine's prefix cache (its last block is recomputed), up to the
// model's 8k context.
func BenchmarkHandoff(b *testing.B) {
	layout := smallLayout(b)
	maxBlocks := slices.Max(handoffTokens) / layout.BlockSize
	pe, de := poolengine.New(layout, maxBlocks), poolengine.New(layout, maxBlocks)
	for _, port := range []string{"kvport", "mainport"} {
		rig := startHandoffRig(b, pe, de, handoffChunkBytes, port == "kvport")
		for _, n := range handoffTokens {
			b.Run(fmt.Sprintf("%s/pool/tokens=%d", port, n), func(b *testing.B) {
				runHandoff(b, rig, prompt(1, n), n/layout.BlockSize*layout.BlockBytes)
			})
		}
		rig.close()
	}

	npe, err := native.New(native.Config{Model: "small", Seed: 7, NumBlocks: 600, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer npe.Close()
	nde, err := native.New(native.Config{Model: "small", Seed: 7, NumBlocks: 600, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer nde.Close()
	nrig := startHandoffRig(b, npe, poolengine.NoLocalCache{Engine: nde}, handoffChunkBytes, true)
	defer nrig.close()
	for _, n := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("kvport/native-small/tokens=%d", n), func(b *testing.B) {
			p := prompt(2, n)
			// The first handoff computes the prompt; it stays in the prefill engine's
			// prefix cache for the timed ones.
			nrig.handoff(b, "fill", p)
			if c := npe.CachedPrefix(p); c != n-layout.BlockSize {
				b.Fatalf("prefill engine has %d of %d tokens cached", c, n)
			}
			runHandoff(b, nrig, p, n/layout.BlockSize*layout.BlockBytes)
		})
	}
}

// BenchmarkHandoffTuning sweeps the chunk size and the decode side's HTTP/2 windows
// on the KV transfer port, for a 16k-token prompt of the small model (96 MiB).
// window=default is handoff.WindowBytes.
func BenchmarkHandoffTuning(b *testing.B) {
	layout := smallLayout(b)
	const n = 16384
	pe, de := poolengine.New(layout, n/layout.BlockSize), poolengine.New(layout, n/layout.BlockSize)
	// Chunks stop short of 4 MiB: grpc-go refuses messages over 4 MiB unless the
	// client raises grpc.MaxCallRecvMsgSize.
	for _, window := range []int{0, 1 << 20, 16 << 20} {
		for _, chunk := range []int{256 << 10, 1 << 20, 4<<20 - 64<<10} {
			name := fmt.Sprintf("window=%s/chunk=%s", sizeName(window), sizeName(chunk))
			b.Run(name, func(b *testing.B) {
				rig := startHandoffRig(b, pe, de, chunk, true, windowOpts(window)...)
				defer rig.close()
				runHandoff(b, rig, prompt(1, n), n/layout.BlockSize*layout.BlockBytes)
			})
		}
	}
}

func sizeName(n int) string {
	switch {
	case n == 0:
		return "default"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 1<<20:
		return fmt.Sprintf("%.2fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// BenchmarkRawTCPLoopback is the baseline: the same byte counts over one
// 127.0.0.1 TCP connection (kept open, as the gRPC connection is), written in 1 MiB
// slices and read with io.Copy into io.Discard; the reader acknowledges each
// handoff's bytes with one byte, so a handoff is timed until all of it has arrived.
func BenchmarkRawTCPLoopback(b *testing.B) {
	layout := smallLayout(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var size [8]byte
				for {
					if _, err := io.ReadFull(c, size[:]); err != nil {
						return
					}
					n := int64(binary.LittleEndian.Uint64(size[:]))
					if _, err := io.Copy(io.Discard, io.LimitReader(c, n)); err != nil {
						return
					}
					if _, err := c.Write([]byte{1}); err != nil {
						return
					}
				}
			}()
		}
	}()
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, n := range handoffTokens {
		size := n / layout.BlockSize * layout.BlockBytes
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			send := func() {
				var hdr [8]byte
				binary.LittleEndian.PutUint64(hdr[:], uint64(size))
				if _, err := c.Write(hdr[:]); err != nil {
					b.Fatal(err)
				}
				for left := size; left > 0; left -= len(src) {
					if _, err := c.Write(src[:min(left, len(src))]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := io.ReadFull(c, hdr[:1]); err != nil {
					b.Fatal(err)
				}
			}
			send() // warm
			b.SetBytes(int64(size))
			b.ResetTimer()
			cpu0 := cpuTime()
			start := time.Now()
			for range b.N {
				send()
			}
			wall := time.Since(start)
			b.ReportMetric((cpuTime()-cpu0).Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(float64(size)*float64(b.N)/wall.Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(wall.Microseconds())/1e3/float64(b.N), "ms/handoff")
			b.ReportMetric(0, "ns/op")
		})
	}
}
