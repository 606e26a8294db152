package integration

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/bench"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// TestEngineOverhead measures what a request pays for going through tandem
// (frontend -> router -> decode worker, real processes) rather than straight to
// the engine server, with the same fake engine answering both, in one run:
// direct and through-tandem batches alternate, so load on the machine falls on
// both alike. It prints a table and asserts nothing about speed; it only fails
// when requests fail. It is a benchmark, so it runs only with TANDEM_OVERHEAD=1:
//
//	TANDEM_OVERHEAD=1 go test -run '^TestEngineOverhead$' -v -timeout 30m ./integration/
//
// TANDEM_OVERHEAD_ROUNDS (default 4) is how many direct/tandem pairs of batches
// each cell runs; TANDEM_OVERHEAD_MODES (default token_ids,text) the workers'
// --engine-token-ids; TANDEM_OVERHEAD_PROFILES (default zero,20ms/5ms) the
// engines' TTFT/ITL; TANDEM_OVERHEAD_CELLS (default 1x8,64x32) the
// concurrency x output tokens. TANDEM_OVERHEAD_PPROF=DIR also takes a 10 s CPU
// profile of each hop while tandem alone serves each cell's load, into DIR.
func TestEngineOverhead(t *testing.T) {
	if os.Getenv("TANDEM_OVERHEAD") == "" {
		t.Skip("a benchmark: set TANDEM_OVERHEAD=1 to run it")
	}
	rounds := envInt(t, "TANDEM_OVERHEAD_ROUNDS", 4)
	text, output := wordTokens(t)
	var rows []overheadRow
	for _, prof := range envList("TANDEM_OVERHEAD_PROFILES", "zero,20ms/5ms") {
		ttft, itl := parseProfile(t, prof)
		for _, mode := range envList("TANDEM_OVERHEAD_MODES", "token_ids,text") {
			// A subtest each, so that each cluster stops before the next starts.
			t.Run(strings.ReplaceAll(prof, "/", "-")+"/"+mode, func(t *testing.T) {
				f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, FirstTokenDelay: ttft, TokenDelay: itl,
					Text: text, Output: output}).Start(t)
				fe, hops := startEngineFront(t, f, mode)
				for _, cell := range envList("TANDEM_OVERHEAD_CELLS", "1x8,64x32") {
					conc, osl := parseCell(t, cell)
					before := readHops(t, hops)
					d, v := measureOverhead(t, f.URL(), "http://"+fe, conc, osl, rounds)
					rows = append(rows, overheadRow{prof, mode, conc, osl, d, v, readHops(t, hops).since(before)})
					if dir := os.Getenv("TANDEM_OVERHEAD_PPROF"); dir != "" {
						name := fmt.Sprintf("%s-%s-%dx%d", strings.ReplaceAll(prof, "/", "-"), mode, conc, osl)
						profileHops(t, dir, name, hops, "http://"+fe, conc, osl)
					}
				}
			})
		}
	}
	t.Log("\n" + overheadTable(rows))
}

// wordTokens are the engine's output, GPT-2 tokens of whole words, and their
// text: with --engine-token-ids text the worker tokenizes what it is sent, and
// each streamed piece of text must be one token, as a real engine's is, or the
// worker would count more tokens than the engine sent and stop early.
func wordTokens(t *testing.T) (func(uint32) string, []uint32) {
	t.Helper()
	f, err := gguf.Open(gpuTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	words := map[uint32]string{}
	ids := tok.Encode(" The quick brown fox jumps over the lazy dog")
	for _, id := range ids {
		words[id] = tok.Decode([]uint32{id})
		if got := tok.Encode(words[id]); len(got) != 1 || got[0] != id {
			t.Fatalf("token %d's text %q encodes to %v", id, words[id], got)
		}
	}
	return func(id uint32) string { return words[id] }, ids
}

// startEngineFront starts a decode worker in front of f, a router and a
// frontend, as separate processes, and returns the frontend's address and hops:
// the frontend's and the decode worker's addresses (for /metrics) and, with
// TANDEM_OVERHEAD_PPROF set, each one's --pprof-addr by name.
func startEngineFront(t *testing.T, f *fakeengine.Server, mode string) (fe string, hops map[string]string) {
	t.Helper()
	hops = map[string]string{}
	pprof := func(name string) []string {
		if os.Getenv("TANDEM_OVERHEAD_PPROF") == "" {
			return nil
		}
		hops[name] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		return []string{"--pprof-addr", hops[name]}
	}
	dec := startService(t, append([]string{"decode", "--listen", "127.0.0.1:0", "--id", "decode-o", "--engine", "vllm",
		"--engine-url", f.URL(), "--engine-token-ids", mode, "--tokenizer", gpuTokenizer, "--model", "fake-model"}, pprof("decode")...)...)
	rtr := startService(t, append([]string{"router", "--listen", "127.0.0.1:0", "--decode-workers", dec}, pprof("router")...)...)
	fe = startService(t, append([]string{"frontend", "--listen", "127.0.0.1:0", "--router", rtr}, pprof("frontend")...)...)
	waitHealthy(t, fe)
	hops["frontend-metrics"], hops["decode-metrics"] = fe, dec
	return fe, hops
}

// profileHops sends the cell's load through tandem alone for 10 s while taking
// a CPU profile of each hop, into dir/name-hop.pprof.
func profileHops(t *testing.T, dir, name string, hops map[string]string, frontend string, conc, osl int) {
	t.Helper()
	const secs = 10
	var wg sync.WaitGroup
	for _, hop := range []string{"frontend", "router", "decode"} {
		addr := hops[hop]
		wg.Go(func() {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
			if err != nil {
				t.Errorf("%s profile: %v", hop, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("%s profile: status %d, %v", hop, resp.StatusCode, err)
				return
			}
			if err := os.WriteFile(filepath.Join(dir, name+"-"+hop+".pprof"), b, 0o644); err != nil {
				t.Error(err)
			}
		})
	}
	temp := 0.0
	c := &bench.Client{URL: frontend, Endpoint: bench.EndpointCompletions, Model: "fake-model", Temperature: &temp, HTTP: bench.NewHTTPClient(conc)}
	if _, err := bench.Run(context.Background(), bench.Config{Concurrency: conc, Duration: secs * time.Second}, &idPrompts{isl: 64, osl: osl}, c); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// overheadRow is one cell of the table: the same load sent directly and
// through tandem.
type overheadRow struct {
	profile, mode  string
	conc, osl      int
	direct, tandem bench.Summary
	hops           hopStats
}

// measureOverhead runs rounds pairs of batches, direct then through tandem,
// after a warm-up of each, and pools each side's results.
func measureOverhead(t *testing.T, engine, frontend string, conc, osl, rounds int) (direct, tandem bench.Summary) {
	t.Helper()
	n := 50
	if conc > 1 {
		n = conc * 5
	}
	temp := 0.0
	clients := []*bench.Client{
		{URL: engine, Endpoint: bench.EndpointCompletions, Model: "fake-model", Temperature: &temp, HTTP: bench.NewHTTPClient(conc)},
		{URL: frontend, Endpoint: bench.EndpointCompletions, Model: "fake-model", Temperature: &temp, HTTP: bench.NewHTTPClient(conc)},
	}
	var results [2][]bench.Result
	var took [2]time.Duration
	for round := -1; round < rounds; round++ {
		for side, c := range clients {
			cfg := bench.Config{Concurrency: conc, Requests: n, Seed: uint64(round + 2)}
			if round < 0 { // warm-up: connections, caches, the JIT of nothing
				cfg.Requests = max(conc, 8)
			}
			rep, err := bench.Run(context.Background(), cfg, &idPrompts{isl: 64, osl: osl}, c)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Overall.Failed > 0 || rep.Overall.ShortOutputs > 0 {
				t.Fatalf("%s: %d failed, %d short: %v", c.URL, rep.Overall.Failed, rep.Overall.ShortOutputs, rep.Overall.Errors)
			}
			if round >= 0 {
				results[side] = append(results[side], rep.Results...)
				took[side] += time.Duration(rep.Overall.DurationS * float64(time.Second))
			}
		}
	}
	return bench.Summarize("direct", results[0], took[0], bench.SLO{}), bench.Summarize("tandem", results[1], took[1], bench.SLO{})
}

// idPrompts is a workload of random token-id prompts of isl tokens asking for
// exactly osl tokens: what a client of an engine server sends.
type idPrompts struct{ isl, osl int }

func (w *idPrompts) Name() string { return fmt.Sprintf("ids %d/%d", w.isl, w.osl) }

func (w *idPrompts) Next(rng *rand.Rand) (bench.Request, error) {
	ids := make([]uint32, w.isl)
	for i := range ids {
		ids[i] = 1000 + rng.Uint32N(40000) // plain words of GPT-2's vocabulary
	}
	return bench.Request{Class: w.Name(), PromptIDs: ids, PromptTokens: w.isl, MaxTokens: w.osl, IgnoreEOS: true}, nil
}

func (w *idPrompts) Done(bench.Request, *bench.Result) {}

func overheadTable(rows []overheadRow) string {
	var b strings.Builder
	var means []string
	b.WriteString("| engine TTFT/ITL | --engine-token-ids | conc x OSL | path | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | req/s | tok/s |\n")
	b.WriteString("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		cell := fmt.Sprintf("| %s | %s | %dx%d |", r.profile, r.mode, r.conc, r.osl)
		for _, s := range []bench.Summary{r.direct, r.tandem} {
			fmt.Fprintf(&b, "%s %s | %.2f | %.2f | %.3f | %.3f | %.1f | %.0f |\n", cell, s.Class,
				s.TTFT.P50, s.TTFT.P99, s.ITL.P50, s.ITL.P99, s.RequestThroughput, s.OutputThroughput)
		}
		d, v := r.direct, r.tandem
		fmt.Fprintf(&b, "%s added | %+.2f | %+.2f | %+.3f | %+.3f | %+.0f%% | %+.0f%% |\n", cell,
			v.TTFT.P50-d.TTFT.P50, v.TTFT.P99-d.TTFT.P99, v.ITL.P50-d.ITL.P50, v.ITL.P99-d.ITL.P99,
			100*(v.RequestThroughput/d.RequestThroughput-1), 100*(v.OutputThroughput/d.OutputThroughput-1))
		h := r.hops
		means = append(means, fmt.Sprintf("| %s | %s | %dx%d | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f |",
			r.profile, r.mode, r.conc, r.osl, d.TTFT.Mean, h.mean("dec-ttft"), h.mean("route"), h.mean("fe-ttft"), v.TTFT.Mean,
			d.ITL.Mean, h.mean("dec-itl"), h.mean("fe-itl"), v.ITL.Mean))
	}
	b.WriteString("\nMeans (ms) as each hop measured them: the client straight at the engine; the decode worker (from Generate to its " +
		"first token); the frontend's Route call; the frontend (from the request's arrival); the client through tandem.\n\n")
	b.WriteString("| engine TTFT/ITL | --engine-token-ids | conc x OSL | TTFT direct | decode | Route | frontend | via tandem " +
		"| ITL direct | decode | frontend | via tandem |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	b.WriteString(strings.Join(means, "\n") + "\n")
	return b.String()
}

// hopStats are histogram sums and counts each hop keeps: the frontend's and
// the decode worker's TTFT and ITL, and the frontend's Route calls to the
// router, for where a request's time went as each hop measured it.
type hopStats map[string][2]float64

// hopMetrics are the histograms read, by the name the table gives them.
var hopMetrics = []struct{ key, addr, metric, label string }{
	{"fe-ttft", "frontend-metrics", "tandem_frontend_time_to_first_token_seconds", ""},
	{"fe-itl", "frontend-metrics", "tandem_frontend_inter_token_latency_seconds", ""},
	{"route", "frontend-metrics", "tandem_grpc_client_handling_seconds", `grpc_method="Route"`},
	{"dec-ttft", "decode-metrics", "tandem_decode_time_to_first_token_seconds", ""},
	{"dec-itl", "decode-metrics", "tandem_decode_inter_token_latency_seconds", ""},
}

func (a hopStats) since(b hopStats) hopStats {
	out := hopStats{}
	for k, v := range a {
		out[k] = [2]float64{v[0] - b[k][0], v[1] - b[k][1]}
	}
	return out
}

// mean is a histogram's mean in ms.
func (a hopStats) mean(k string) float64 { return 1e3 * a[k][0] / a[k][1] }

func readHops(t *testing.T, hops map[string]string) hopStats {
	t.Helper()
	out := hopStats{}
	pages := map[string]string{}
	for _, m := range hopMetrics {
		page, ok := pages[m.addr]
		if !ok {
			resp, err := http.Get("http://" + hops[m.addr] + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			page, pages[m.addr] = string(b), string(b)
		}
		v := out[m.key]
		for line := range strings.Lines(page) {
			name, val, _ := strings.Cut(strings.TrimSpace(line), " ")
			if !strings.Contains(name, m.label) {
				continue
			}
			f, _ := strconv.ParseFloat(val, 64)
			switch {
			case strings.HasPrefix(name, m.metric+"_sum"):
				v[0] += f
			case strings.HasPrefix(name, m.metric+"_count"):
				v[1] += f
			}
		}
		out[m.key] = v
	}
	return out
}

func envList(key, def string) []string {
	v := os.Getenv(key)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

// parseProfile reads "zero" or "TTFT/ITL", e.g. "20ms/5ms".
func parseProfile(t *testing.T, s string) (ttft, itl time.Duration) {
	t.Helper()
	if s == "zero" {
		return 0, 0
	}
	a, b, ok := strings.Cut(s, "/")
	ttft, err1 := time.ParseDuration(a)
	itl, err2 := time.ParseDuration(b)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("engine profile %q: want zero or TTFT/ITL, e.g. 20ms/5ms", s)
	}
	return ttft, itl
}

// parseCell reads "CONCxOSL", e.g. "64x32".
func parseCell(t *testing.T, s string) (conc, osl int) {
	t.Helper()
	a, b, ok := strings.Cut(s, "x")
	conc, err1 := strconv.Atoi(a)
	osl, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || conc < 1 || osl < 1 {
		t.Fatalf("cell %q: want CONCURRENCYxOUTPUT_TOKENS, e.g. 64x32", s)
	}
	return conc, osl
}
