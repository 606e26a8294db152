package native

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/models"
)

// Two engines of one process serving the same file hold one copy of its weights,
// and still generate independently, exactly as one engine alone does.
func TestEnginesShareLoadedWeights(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stories.gguf")
	if err := os.WriteFile(path, models.Stories260K, 0o644); err != nil {
		t.Fatal(err)
	}
	req := engine.Request{ID: "r", Prompt: []uint32{1, 20, 30}, MaxTokens: 40, Sampling: sampled(7)}
	loads := weightLoads.Load()
	a, err := New(Config{Model: path, NumBlocks: 64})
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := generate(t, a, req)

	b, err := New(Config{Model: path, NumBlocks: 32})
	if err != nil {
		t.Fatal(err)
	}
	if a.model.w != b.model.w || a.ModelFile() != b.ModelFile() {
		t.Fatal("two engines serving one file loaded its weights twice")
	}
	if got := weightLoads.Load() - loads; got != 1 {
		t.Fatalf("%d loads for two engines of one file, want 1", got)
	}
	if a.Info().TotalBlocks == b.Info().TotalBlocks {
		t.Fatal("the engines share their KV pool size too")
	}
	var wg sync.WaitGroup
	outs := make([][]uint32, 4)
	for i := range outs {
		wg.Go(func() {
			e := []*Engine{a, b}[i%2]
			st, err := e.Generate(t.Context(), req)
			if err != nil {
				t.Error(err)
				return
			}
			outs[i] = testutil.Drain(t, context.Background(), st)
		})
	}
	wg.Wait()
	for i, out := range outs {
		if !slices.Equal(out, alone) {
			t.Errorf("stream %d on a shared model:\n got %v\nwant %v", i, out, alone)
		}
	}

	// The last engine keeps the weights (and the file) alive after the first closes.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := generate(t, b, req); !slices.Equal(got, alone) {
		t.Errorf("after the other engine closed:\n got %v\nwant %v", got, alone)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c := newTestEngine(t, Config{Model: path})
	if got := weightLoads.Load() - loads; got != 2 {
		t.Fatalf("%d loads after every engine closed and a new one opened, want 2", got)
	}
	if got, _ := generate(t, c, req); !slices.Equal(got, alone) {
		t.Errorf("after a reload:\n got %v\nwant %v", got, alone)
	}
}

// Random shapes share by seed: a different seed is a different model.
func TestRandomWeightsSharedBySeed(t *testing.T) {
	a := newTestEngine(t, Config{Model: "tiny", Seed: 11})
	b := newTestEngine(t, Config{Model: "tiny", Seed: 11})
	c := newTestEngine(t, Config{Model: "tiny", Seed: 12})
	if a.model.w != b.model.w {
		t.Error("two engines of tiny with one seed have their own weights")
	}
	if a.model.w == c.model.w || a.Info().Layout.Fingerprint == c.Info().Layout.Fingerprint {
		t.Error("engines with different seeds share weights")
	}
}

// A caller's own file is neither shared nor closed by the engine.
func TestCallerFileNotShared(t *testing.T) {
	f, err := OpenModelFile(models.Stories260KName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := newTestEngine(t, Config{File: f})
	b := newTestEngine(t, Config{File: f})
	if a.model.w == b.model.w {
		t.Error("engines on a caller's file share weights the caller may close under one of them")
	}
}
