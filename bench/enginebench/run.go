package enginebench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/randmodel"
	"github.com/tandem-serve/tandem/tokenizer"
)

// Options are what `tandem bench engine` measures.
type Options struct {
	Model   string // a GGUF file, or a name native.New accepts
	Threads []int  // GOMAXPROCS of each measurement
	Prompt  int    // prompt tokens of the prompt-processing test (llama-bench -p)
	Gen     int    // tokens of the generation test (llama-bench -n)
	Batch   int    // sequences decoding together in the batched generation test (0: none)
	Reps    int    // repetitions of each test (llama-bench -r)
	Seed    uint64 // prompt tokens
	// JSONSchema, when set, is a JSON Schema file: the generation tests run again
	// with their output constrained to it (structured outputs), rows marked "json".
	JSONSchema string
	// ConstraintVocab "cl100k" compiles the constraint against cl100k_base's first
	// VocabSize ids instead of the model's tokenizer: a real BPE vocabulary for a
	// make-model file, whose tokenizer is stories260K's 512 tokens padded.
	ConstraintVocab string
	// Temperature of the generation tests' draws (0: greedy, as llama-bench); each
	// sequence has its own seed, so sampled runs differ.
	Temperature float64
}

// DefaultOptions are llama-bench's defaults, and 8 sequences for the batched test.
func DefaultOptions() Options {
	return Options{Threads: []int{runtime.NumCPU()}, Prompt: 512, Gen: 128, Batch: 8, Reps: 3, Seed: 1}
}

// threadList is a flag.Value of comma-separated thread counts.
type threadList struct{ p *[]int }

func (t threadList) String() string {
	if t.p == nil {
		return ""
	}
	s := make([]string, len(*t.p))
	for i, n := range *t.p {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (t threadList) Set(v string) error {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("thread count %q is not a positive integer", f)
		}
		out = append(out, n)
	}
	*t.p = out
	return nil
}

// RegisterFlags adds the options' flags, with llama-bench's names where it has them.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Model, "model", o.Model, "GGUF model file (or a random shape: tiny, small; or stories260K)")
	fs.Var(threadList{&o.Threads}, "threads", "comma-separated thread counts (GOMAXPROCS) to measure")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens of the prompt-processing test (ppN); 0 skips it")
	fs.IntVar(&o.Gen, "gen", o.Gen, "generated tokens of the generation tests (tgN); 0 skips them")
	fs.IntVar(&o.Batch, "batch", o.Batch, "sequences generating together in the batched test; 0 or 1 skips it")
	fs.IntVar(&o.Reps, "reps", o.Reps, "repetitions of each test")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the random prompt tokens")
	fs.StringVar(&o.JSONSchema, "json-schema", o.JSONSchema, "JSON Schema file: also run the generation tests constrained to it (structured outputs)")
	fs.StringVar(&o.ConstraintVocab, "constraint-vocab", o.ConstraintVocab, `"cl100k": compile the constraint against cl100k_base's ids instead of the model's tokenizer`)
	fs.Float64Var(&o.Temperature, "temperature", o.Temperature, "temperature of the generation tests' draws (0: greedy)")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Model == "" {
		errs = append(errs, errors.New("--model is required"))
	}
	if len(o.Threads) == 0 {
		errs = append(errs, errors.New("--threads needs at least one thread count"))
	}
	if o.Prompt < 0 || o.Gen < 0 || o.Batch < 0 {
		errs = append(errs, fmt.Errorf("--prompt %d, --gen %d and --batch %d must not be negative", o.Prompt, o.Gen, o.Batch))
	}
	if o.Reps < 1 {
		errs = append(errs, fmt.Errorf("--reps %d must be at least 1", o.Reps))
	}
	if !(o.Temperature >= 0 && o.Temperature <= 2) {
		errs = append(errs, fmt.Errorf("--temperature %v must be between 0 and 2", o.Temperature))
	}
	if o.ConstraintVocab != "" && o.ConstraintVocab != "cl100k" {
		errs = append(errs, fmt.Errorf("--constraint-vocab %q: want cl100k or nothing", o.ConstraintVocab))
	}
	return errors.Join(errs...)
}

// Result is one test's figure: tokens per second over the repetitions.
type Result struct {
	Threads int
	Test    string // pp512, tg128, tg128x8
	Mean    float64
	Std     float64
	// CPU is the process's CPU time over the tests' wall time times the threads: near
	// 1 when the engine had its cores, lower when other processes took them (then the
	// rates understate what the engine does on an idle machine).
	CPU float64
}

// Run measures the model and writes llama-bench's table to out, one row per test
// and thread count.
func Run(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg := native.Config{Model: o.Model, MaxBatchTokens: max(512, o.Prompt), MaxRunning: max(64, o.Batch)}
	var file *gguf.File
	if !native.IsRandom(o.Model) {
		f, err := native.OpenModelFile(o.Model)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		file, cfg.File = f, f
	}
	var constraint *engine.Constraint
	if o.JSONSchema != "" {
		schema, err := os.ReadFile(o.JSONSchema)
		if err != nil {
			return nil, err
		}
		constraint = &engine.Constraint{JSONSchema: string(schema)}
	}
	if o.ConstraintVocab == "cl100k" {
		tok, err := tokenizer.CL100K()
		if err != nil {
			return nil, err
		}
		cfg.Tokenizer = tok
	}
	ctxLen := o.Prompt + o.Gen + 1
	e, err := native.New(cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	info := e.Info()
	if info.ContextLength > 0 && ctxLen > info.ContextLength {
		return nil, fmt.Errorf("enginebench: %d prompt and %d generated tokens exceed the model's context of %d",
			o.Prompt, o.Gen, info.ContextLength)
	}
	label, size, params := describe(file, info.Model)
	if rss, ok := residentBytes(); ok {
		fmt.Fprintf(out, "resident memory after load: %.1f MiB (%s of tensors)\n\n", float64(rss)/(1<<20), size)
	}
	fmt.Fprintf(out, "| model | size | params | threads | test | t/s | cpu |\n| --- | ---: | ---: | ---: | --- | ---: | ---: |\n")
	temp := float32(o.Temperature)
	b := &bencher{e: e, vocab: info.VocabSize, seed: o.Seed, temperature: temp}
	jb := &bencher{e: e, vocab: info.VocabSize, seed: o.Seed, temperature: temp, constraint: constraint}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var results []Result
	var coldRates []float64 // the constrained warm-up run at each thread count
	for _, t := range o.Threads {
		runtime.GOMAXPROCS(t)
		// Warm up: pages of the mapped weights in, scratch buffers grown, one pass of
		// each kind, untimed (llama-bench does the same).
		if _, err := b.prefill(ctx, min(o.Prompt, 64)+1); err != nil {
			return results, err
		}
		if _, err := b.generate(ctx, 1, 2); err != nil {
			return results, err
		}
		if constraint != nil {
			// The constraint compiled and its first states' masks built, as a
			// server's cache would hold them for a schema it has seen. This
			// first run is a schema's first request; its rate is printed.
			cold, err := jb.generate(ctx, 1, o.Gen)
			if err != nil {
				return results, err
			}
			coldRates = append(coldRates, cold)
		}
		tests := []struct {
			name string
			run  func() (float64, error)
			skip bool
		}{
			{fmt.Sprintf("pp%d", o.Prompt), func() (float64, error) { return b.prefill(ctx, o.Prompt) }, o.Prompt == 0},
			{fmt.Sprintf("tg%d", o.Gen), func() (float64, error) { return b.generate(ctx, 1, o.Gen) }, o.Gen == 0},
			{fmt.Sprintf("tg%d x%d", o.Gen, o.Batch), func() (float64, error) { return b.generate(ctx, o.Batch, o.Gen) }, o.Gen == 0 || o.Batch < 2},
			{fmt.Sprintf("tg%d json", o.Gen), func() (float64, error) { return jb.generate(ctx, 1, o.Gen) }, o.Gen == 0 || constraint == nil},
			{fmt.Sprintf("tg%d x%d json", o.Gen, o.Batch), func() (float64, error) { return jb.generate(ctx, o.Batch, o.Gen) },
				o.Gen == 0 || o.Batch < 2 || constraint == nil},
		}
		for _, tc := range tests {
			if tc.skip {
				continue
			}
			var rates []float64
			cpu0, wall0 := cpuTime(), time.Now()
			for range o.Reps {
				r, err := tc.run()
				if err != nil {
					return results, fmt.Errorf("enginebench: %s at %d threads: %w", tc.name, t, err)
				}
				rates = append(rates, r)
			}
			mean, std := meanStd(rates)
			cpu := (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds() / float64(t)
			res := Result{Threads: t, Test: tc.name, Mean: mean, Std: std, CPU: cpu}
			results = append(results, res)
			fmt.Fprintf(out, "| %s | %s | %s | %d | %s | %.2f ± %.2f | %.0f%% |\n", label, size, params, t, tc.name, mean, std, 100*cpu)
		}
	}
	if constraint != nil {
		// Paired: plain and constrained runs alternate, so load that comes and goes
		// on a shared machine falls on both alike; the ratio is per pair. The
		// process's CPU time per run is the second figure: what other processes
		// take from the cores stretches the wall time, not the work done.
		for _, t := range o.Threads {
			runtime.GOMAXPROCS(t)
			var ratios, cpuRatios []float64
			for range o.Reps {
				c0 := cpuTime()
				plain, err := b.generate(ctx, 1, o.Gen)
				if err != nil {
					return results, err
				}
				c1 := cpuTime()
				constrained, err := jb.generate(ctx, 1, o.Gen)
				if err != nil {
					return results, err
				}
				c2 := cpuTime()
				ratios = append(ratios, constrained/plain)
				if c1 > c0 {
					cpuRatios = append(cpuRatios, float64(c2-c1)/float64(c1-c0))
				}
			}
			printRatios(out, fmt.Sprintf("paired tg%d at %d threads, temperature %g, json / plain t/s", o.Gen, t, o.Temperature), ratios)
			printRatios(out, fmt.Sprintf("paired tg%d at %d threads, temperature %g, json / plain CPU time per run", o.Gen, t, o.Temperature), cpuRatios)
		}
		// Only the first is a first request: the others find the cache warm.
		fmt.Fprintf(out, "\nfirst constrained tg%d, at %d threads (the schema compiled, masks built on first visits): %.2f t/s\n",
			o.Gen, o.Threads[0], coldRates[0])
		st := e.Stats()
		fmt.Fprintf(out, "\nconstrained draws: %d, of which the constraint refused the first pick (mask applied): %d\n", st.ConstrainedDraws, st.MaskedDraws)
	}
	return results, nil
}

// printRatios writes a paired measurement: mean ± standard deviation, median and
// every pair's ratio.
func printRatios(out io.Writer, what string, ratios []float64) {
	if len(ratios) == 0 {
		return
	}
	mean, std := meanStd(ratios)
	sorted := slices.Sorted(slices.Values(ratios))
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + median) / 2
	}
	fmt.Fprintf(out, "\n%s: %.3f ± %.3f, median %.3f (%d pairs:", what, mean, std, median, len(ratios))
	for _, r := range ratios {
		fmt.Fprintf(out, " %.3f", r)
	}
	fmt.Fprintln(out, ")")
}

// describe names the model as llama-bench does: its name and file type, the bytes
// of its tensors and its parameter count.
func describe(f *gguf.File, name string) (label, size, params string) {
	if f == nil {
		return name, "-", "-"
	}
	var bytes, elems uint64
	for _, t := range f.Tensors() {
		bytes += uint64(len(t.Data))
		elems += t.Elems()
	}
	return name + " " + typeLabel(f), fmt.Sprintf("%.2f MiB", float64(bytes)/(1<<20)), fmt.Sprintf("%.2f M", float64(elems)/1e6)
}

// ftypeNames are llama.cpp's names of its general.file_type values (LLAMA_FTYPE_*),
// which llama-bench prints.
var ftypeNames = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
	11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
	18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
	25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
	32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}

// typeLabel is the type a file was quantized to, as its general.file_type says:
// counting tensors misnames a file whose rows are too short for its type's blocks
// (SmolLM2's 576-wide rows make most of a Q6_K file Q8_0, quantize's fallback). A
// file without the key (or with an unknown value) is named by the type holding
// most of its bytes.
func typeLabel(f *gguf.File) string {
	if ft, err := f.Uint("general.file_type"); err == nil {
		if n, ok := ftypeNames[ft]; ok {
			return n
		}
	}
	byType := map[gguf.Type]int{}
	for _, t := range f.Tensors() {
		byType[t.Type] += len(t.Data)
	}
	var main gguf.Type
	for t, n := range byType {
		if n > byType[main] || n == byType[main] && t < main {
			main = t
		}
	}
	return main.String()
}

func meanStd(v []float64) (mean, std float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) < 2 {
		return mean, 0
	}
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)-1))
}

// bencher draws prompts that never share a cached prefix, so every test computes
// every token.
type bencher struct {
	e     *native.Engine
	vocab int
	seed  uint64
	n     uint64
	// constraint is put on every generated sequence (nil: free text).
	constraint  *engine.Constraint
	temperature float32
}

func (b *bencher) prompt(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		b.n++
		p[i] = uint32(randmodel.SplitMix(b.seed^randmodel.SplitMix(b.n)) % uint64(b.vocab))
	}
	return p
}

// prefill is prompt processing: one n-token prompt, timed to its first token.
func (b *bencher) prefill(ctx context.Context, n int) (float64, error) {
	p := b.prompt(n)
	start := time.Now()
	x, err := b.e.Prefill(ctx, engine.Request{Prompt: p, MaxTokens: 1})
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	x.Release()
	return float64(n) / d.Seconds(), nil
}

// generate is text generation as llama-bench's tgN: each of seqs sequences starts
// from one token and runs n forward passes of one token each (the first pass is its
// one-token prompt), all sequences in the same passes.
func (b *bencher) generate(ctx context.Context, seqs, n int) (float64, error) {
	streams := make([]engine.Stream, seqs)
	start := time.Now()
	for i := range streams {
		b.n++
		sp := engine.Sampling{Constraint: b.constraint, Temperature: b.temperature, Seed: randmodel.SplitMix(b.seed + b.n)}
		st, err := b.e.Generate(ctx, engine.Request{Prompt: b.prompt(1), MaxTokens: n, Sampling: sp})
		if err != nil {
			return 0, err
		}
		streams[i] = st
	}
	var wg sync.WaitGroup
	errs := make([]error, seqs)
	for i, st := range streams {
		wg.Go(func() {
			got := 0
			for {
				_, err := st.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					errs[i] = err
					return
				}
				got++
			}
			if got != n {
				errs[i] = fmt.Errorf("sequence %d ended after %d of %d tokens (%v)", i, got, n, st.Finish())
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(seqs*n) / d.Seconds(), nil
}

// residentBytes is the process's resident set (VmRSS in /proc/self/status), where
// the system reports it.
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
