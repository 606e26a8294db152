package native

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/models"
)

// loaded is one model's weights, built once per process and shared by every engine
// that serves the same model: the packed f32 copies are most of a worker's memory,
// and tandem up runs a prefill and a decode engine in one process. Weights are
// read-only after loading; each engine keeps its own KV pool, scheduler and
// sampling state.
type loaded struct {
	key  loadKey // zero: not in the registry (the caller's own file)
	mc   ModelConfig
	w    *weights
	file *gguf.File // opened here and closed with the last reference; nil otherwise
	// ready is closed when mc, w, file and err are set.
	ready chan struct{}
	err   error
	refs  int // guarded by registry.mu
}

// loadKey names what a load depends on: a random shape and its seed, the embedded
// model, or a file by path and the size and time it had (a file replaced on disk is
// a new model).
type loadKey struct {
	name  string
	seed  uint64
	size  int64
	mtime int64
}

var registry = struct {
	mu sync.Mutex
	m  map[loadKey]*loaded
}{m: map[loadKey]*loaded{}}

// weightLoads counts the models this process has actually loaded, for tests that
// check two engines shared one load.
var weightLoads atomic.Int64

// keyFor returns the registry key of cfg's model; ok is false when the caller
// supplied the file, which the engine then neither shares nor closes.
func keyFor(cfg Config) (loadKey, bool, error) {
	if cfg.File != nil {
		return loadKey{}, false, nil
	}
	name := cmpStr(cfg.Model, "tiny")
	if IsRandom(name) {
		return loadKey{name: "random:" + name, seed: cfg.Seed}, true, nil
	}
	if name == models.Stories260KName {
		return loadKey{name: name}, true, nil
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return loadKey{}, false, fmt.Errorf("native: model %q: %w", name, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		// OpenModelFile reports a missing file with the models this could have meant.
		return loadKey{}, false, nil
	}
	return loadKey{name: abs, size: st.Size(), mtime: st.ModTime().UnixNano()}, true, nil
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// acquireModel returns cfg's model, loading it unless another engine in this
// process holds it already. Release it with releaseModel when the engine closes.
func acquireModel(cfg Config) (*loaded, error) {
	key, shared, err := keyFor(cfg)
	if err != nil {
		return nil, err
	}
	if !shared {
		l := &loaded{refs: 1, ready: make(chan struct{})}
		l.mc, l.w, l.file, l.err = loadModel(cfg)
		if l.err == nil {
			weightLoads.Add(1)
		}
		close(l.ready)
		return l, l.err
	}
	registry.mu.Lock()
	l, ok := registry.m[key]
	if ok {
		l.refs++
		registry.mu.Unlock()
		<-l.ready
		if l.err != nil {
			releaseModel(l)
			return nil, l.err
		}
		return l, nil
	}
	l = &loaded{key: key, refs: 1, ready: make(chan struct{})}
	registry.m[key] = l
	registry.mu.Unlock()
	l.mc, l.w, l.file, l.err = loadModel(cfg)
	if l.err != nil {
		// Engines waiting for this load fail with it; the next one tries again.
		registry.mu.Lock()
		delete(registry.m, key)
		registry.mu.Unlock()
		close(l.ready)
		return nil, l.err
	}
	weightLoads.Add(1)
	close(l.ready)
	return l, nil
}

// releaseModel drops one engine's reference; the last one closes the file the
// weights were read from (quantized weights are used in place in its mapping).
func releaseModel(l *loaded) error {
	registry.mu.Lock()
	l.refs--
	last := l.refs == 0
	if last && l.key != (loadKey{}) && registry.m[l.key] == l {
		delete(registry.m, l.key)
	}
	registry.mu.Unlock()
	if !last || l.file == nil {
		return nil
	}
	return l.file.Close()
}

// sharers is how many engines in this process use l's weights.
func (l *loaded) sharers() int {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return l.refs
}
