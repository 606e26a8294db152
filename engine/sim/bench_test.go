package sim

import (
	"context"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// BenchmarkStep is one engine step's own cost (planning, drawing tokens, applying)
// with a full batch of 256 sequences decoding beside a chunked prefill: what one
// simulated device spends in CPU per step, so what bounds how many fit a process.
func BenchmarkStep(b *testing.B) {
	p := Profiles()[0]
	cfg := DefaultConfig()
	cfg.Profile = p
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	e.dev.manual = true
	var seqs []*seq
	for i := range p.MaxNumSeqs - 1 {
		s, err := e.Generate(context.Background(), engine.Request{Prompt: testPrompt(64, i), MaxTokens: 2048})
		if err != nil {
			b.Fatal(err)
		}
		seqs = append(seqs, s.(*seq))
	}
	for e.dev.queued() > 0 {
		e.dev.stepOnce()
	}
	long := engine.Request{Prompt: testPrompt(7000, 9999), MaxTokens: 1}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%1000 == 0 {
			b.StopTimer()
			// Keep the sequences decoding: read what they drew, rewind their budget.
			e.dev.mu.Lock()
			for _, s := range seqs {
				s.buf, s.read, s.produced = s.buf[:0], 0, 1
			}
			e.dev.mu.Unlock()
			if _, err := e.Generate(context.Background(), long); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if st, ok := e.dev.stepOnce(); !ok || st.Decode < p.MaxNumSeqs-1 {
			b.Fatalf("step %d: %+v", i, st)
		}
	}
}
