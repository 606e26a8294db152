package native

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tandem-serve/tandem/engine/quant"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/parallel"
	"github.com/tandem-serve/tandem/models"
	"github.com/zeebo/xxh3"
)

// OpenModelFile resolves a model name that is not a random shape: the embedded
// stories260K, or a path to a GGUF file. The caller closes the file when the engine
// that uses it is closed.
func OpenModelFile(name string) (*gguf.File, error) {
	f, err := models.Open(name)
	if err != nil {
		return nil, fmt.Errorf("native: %w (or a random shape: %s)", err, strings.Join(Models(), ", "))
	}
	return f, nil
}

// IsRandom reports whether name is one of the random-weight benchmark shapes.
func IsRandom(name string) bool {
	_, ok := LookupModel(name)
	return ok
}

// modelConfigFromGGUF reads the hyperparameters of a supported architecture. Every
// value comes from the file; a missing required one is an error naming the key.
func modelConfigFromGGUF(f *gguf.File, fallbackName string) (ModelConfig, error) {
	var mc ModelConfig
	arch, err := f.String("general.architecture")
	if err != nil {
		return mc, fmt.Errorf("native: %w", err)
	}
	spec, ok := archBase[arch]
	if !ok {
		return mc, fmt.Errorf("native: unsupported architecture %q (supported: %s)", arch, supportedArchs())
	}
	mc.Arch, mc.RopeStyle = arch, spec.rope
	mc.Name, _ = f.String("general.name")
	if mc.Name == "" {
		mc.Name = fallbackName
	}
	var errs []error
	need := func(key string) int {
		v, err := f.Uint(arch + "." + key)
		if err != nil {
			errs = append(errs, err)
		}
		return int(v)
	}
	optional := func(key string, def int) int {
		v, err := f.Uint(arch + "." + key)
		if errors.Is(err, gguf.ErrMissing) {
			return def
		} else if err != nil {
			errs = append(errs, err)
		}
		return int(v)
	}
	optFloat := func(key string, def float64) float64 {
		v, err := f.Float(arch + "." + key)
		if errors.Is(err, gguf.ErrMissing) {
			return def
		} else if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	mc.DModel = need("embedding_length")
	mc.Layers = need("block_count")
	mc.Heads = need("attention.head_count")
	mc.FFN = need("feed_forward_length")
	mc.ContextLength = need("context_length")
	mc.KVHeads = optional("attention.head_count_kv", mc.Heads)
	if mc.Heads > 0 {
		mc.HeadDim = optional("attention.key_length", mc.DModel/mc.Heads)
	}
	mc.RopeDims = optional("rope.dimension_count", mc.HeadDim)
	mc.RopeTheta = optFloat("rope.freq_base", 10000)
	mc.NormEps = float32(optFloat("attention.layer_norm_rms_epsilon", 1e-5))
	if v, err := f.Uint(arch + ".attention.value_length"); err == nil && int(v) != mc.HeadDim {
		errs = append(errs, fmt.Errorf("attention.value_length %d differs from key_length %d", v, mc.HeadDim))
	}
	switch typ, _ := f.String(arch + ".rope.scaling.type"); typ {
	case "", "none":
	case "linear":
		mc.RopeScale = optFloat("rope.scaling.factor", 1)
	default:
		errs = append(errs, fmt.Errorf("rope scaling %q is not supported (supported: none, linear, and Llama 3's rope_freqs)", typ))
	}
	if err := errors.Join(errs...); err != nil {
		return mc, fmt.Errorf("native: %s model: %w", arch, err)
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || len(emb.Dims) != 2 {
		return mc, errors.New("native: no 2-D token_embd.weight tensor")
	}
	mc.VocabSize = int(emb.Dims[1])
	switch {
	case mc.DModel <= 0 || mc.Layers <= 0 || mc.Heads <= 0 || mc.KVHeads <= 0 || mc.FFN <= 0 || mc.HeadDim <= 0:
		return mc, fmt.Errorf("native: %s model has a zero dimension: %+v", arch, mc)
	case mc.Heads%mc.KVHeads != 0:
		return mc, fmt.Errorf("native: %d heads are not a multiple of %d KV heads", mc.Heads, mc.KVHeads)
	case mc.RopeDims%2 != 0 || mc.RopeDims > mc.HeadDim:
		return mc, fmt.Errorf("native: rope over %d dimensions of a %d-dimension head", mc.RopeDims, mc.HeadDim)
	case mc.DModel%panelWidth != 0:
		return mc, fmt.Errorf("native: embedding length %d is not a multiple of %d", mc.DModel, panelWidth)
	case int(emb.Dims[0]) != mc.DModel:
		return mc, fmt.Errorf("native: token_embd.weight is %v, want embedding length %d", emb.Dims, mc.DModel)
	}
	return mc, readArch(f, &mc)
}

// tensorFloats reads a small F32, F16 or BF16 tensor (a norm or a bias) of n values.
func tensorFloats(f *gguf.File, name string, n int) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("native: missing tensor %s", name)
	}
	if t.Elems() != uint64(n) {
		return nil, fmt.Errorf("native: tensor %s has %d values, want %d", name, t.Elems(), n)
	}
	out := make([]float32, n)
	rs, err := rowsOf(t, n)
	if err != nil {
		return nil, err
	}
	rs.row(0, out)
	return out, nil
}

// rowsOf reads a tensor as rows of dim values, in place: unquantized rows are
// converted as they are read, quantized ones dequantized.
func rowsOf(t gguf.TensorInfo, dim int) (rowSource, error) {
	switch t.Type {
	case gguf.TypeF32:
		return f32Rows{t.Data, dim}, nil
	case gguf.TypeF16:
		return f16Rows{t.Data, dim}, nil
	case gguf.TypeBF16:
		return bf16Rows{t.Data, dim}, nil
	}
	if !quant.Supported(t.Type) {
		return nil, unsupportedType(t)
	}
	m, err := quant.NewMatrix(t.Type, dim, int(t.Elems())/dim, t.Data)
	if err != nil {
		return nil, fmt.Errorf("native: tensor %s: %w", t.Name, err)
	}
	return quantRows{m}, nil
}

func unsupportedType(t gguf.TensorInfo) error {
	return fmt.Errorf("native: tensor %s has type %s, which tandem does not compute with "+
		"(supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)", t.Name, t.Type)
}

// quantRows looks rows up in a quantized matrix (a quantized token embedding).
type quantRows struct{ m *quant.Matrix }

func (q quantRows) row(i int, dst []float32) { q.m.Row(i, dst) }

// quantLinear is a linear layer on quantized weights, used in place in the mapping.
type quantLinear struct{ m *quant.Matrix }

func (q quantLinear) mulAdd(m int, a []float32, lda int, c []float32, ldc int) {
	q.m.MulAdd(m, a, lda, c, ldc)
}
func (q quantLinear) inDim() int  { return q.m.K() }
func (q quantLinear) outDim() int { return q.m.N() }
func (q quantLinear) ldOut() int  { return q.m.N() }

func isFloat(t gguf.Type) bool {
	return t == gguf.TypeF32 || t == gguf.TypeF16 || t == gguf.TypeBF16
}

// linearOf builds one layer from matrices with k inputs side by side. Unquantized
// weights are packed into one matrix for the f32 kernels (one product for Q, K and
// V); quantized ones stay as they are in the file, each its own product.
func linearOf(k int, ts ...gguf.TensorInfo) (linear, error) {
	allFloat := true
	for _, t := range ts {
		allFloat = allFloat && isFloat(t.Type)
	}
	if allFloat {
		return packTensors(k, ts...)
	}
	parts := make([]linear, len(ts))
	for i, t := range ts {
		if isFloat(t.Type) {
			p, err := packTensors(k, t)
			if err != nil {
				return nil, err
			}
			parts[i] = p
			continue
		}
		if !quant.Supported(t.Type) {
			return nil, unsupportedType(t)
		}
		m, err := quant.NewMatrix(t.Type, k, int(t.Dims[1]), t.Data)
		if err != nil {
			return nil, fmt.Errorf("native: tensor %s: %w", t.Name, err)
		}
		parts[i] = quantLinear{m}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return newConcat(parts...), nil
}

// matrix returns a linear layer's weights with k inputs and n outputs, checking the
// tensor's shape: ggml stores it as n rows of k values.
func matrixTensor(f *gguf.File, name string, k, n int) (gguf.TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return t, fmt.Errorf("native: missing tensor %s", name)
	}
	if len(t.Dims) != 2 || int(t.Dims[0]) != k || int(t.Dims[1]) != n {
		return t, fmt.Errorf("native: tensor %s is %v, want [%d %d]", name, t.Dims, k, n)
	}
	return t, nil
}

// packTensors packs matrices with the same input width side by side into one
// packed matrix: Q, K and V (or gate and up) become one product.
func packTensors(k int, ts ...gguf.TensorInfo) (*packed, error) {
	n := 0
	srcs := make([]rowSource, len(ts))
	for i, t := range ts {
		rs, err := rowsOf(t, k)
		if err != nil {
			return nil, err
		}
		srcs[i] = rs
		n += int(t.Dims[1])
	}
	p := newPacked(k, n)
	col := 0
	for i, t := range ts {
		fillColumns(p, col, int(t.Dims[1]), srcs[i])
		col += int(t.Dims[1])
	}
	return p, nil
}

// fillColumns sets columns [col0, col0+n) of p from rows 0..n-1 of src.
func fillColumns(p *packed, col0, n int, src rowSource) {
	parallel.For(n, p.K, parallel.MinWork, func(lo, hi int) {
		row := make([]float32, p.K)
		for j := lo; j < hi; j++ {
			src.row(j, row)
			c := col0 + j
			pan := p.panel(c / panelWidth)
			for kk, v := range row {
				pan[kk*panelWidth+c%panelWidth] = v
			}
		}
	})
}

// ropeFreqFactors reads Llama 3's rope_freqs tensor: one divisor per rotated pair,
// which llama.cpp's converter computes from the rope_scaling of the model's config.
func ropeFreqFactors(f *gguf.File, mc ModelConfig) ([]float32, error) {
	if _, ok := f.Tensor("rope_freqs.weight"); !ok {
		return nil, nil
	}
	return tensorFloats(f, "rope_freqs.weight", mc.ropeDims()/2)
}

func baseName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
}

// loadWeights builds the forward pass's weights from the file's tensors.
func loadWeights(f *gguf.File, mc ModelConfig) (*weights, error) {
	d := mc.DModel
	w := &weights{}
	var err error
	// The f32 kernels read packed copies of the F32, F16 and BF16 matrices (all but a
	// separate token embedding, which is read in place): the file's pages of those
	// would only double an unquantized model's resident memory, so each leaves as
	// soon as it is copied (and hashed), not after the whole model.
	_, separate := f.Tensor("output.weight")
	packedCopy := func(t gguf.TensorInfo) bool {
		return len(t.Dims) == 2 && isFloat(t.Type) && !(separate && t.Name == "token_embd.weight")
	}
	drop := func(prefix string) {
		for _, t := range f.Tensors() {
			if strings.HasPrefix(t.Name, prefix) && packedCopy(t) {
				f.DontNeed(t)
			}
		}
	}
	if w.finalNorm, err = tensorFloats(f, "output_norm.weight", d); err != nil {
		return nil, err
	}
	if w.ropeFreqs, err = ropeFreqFactors(f, mc); err != nil {
		return nil, err
	}
	emb, _ := f.Tensor("token_embd.weight")
	if out, ok := f.Tensor("output.weight"); ok {
		if _, err := matrixTensor(f, "output.weight", d, mc.VocabSize); err != nil {
			return nil, err
		}
		if w.output, err = linearOf(d, out); err != nil {
			return nil, err
		}
		if w.embed, err = rowsOf(emb, d); err != nil {
			return nil, err
		}
	} else {
		// Tied: the output matrix is the embedding, stored once.
		out, err := linearOf(d, emb)
		if err != nil {
			return nil, err
		}
		w.output = out
		switch o := out.(type) {
		case *packed:
			w.embed = columnsOf{o}
		case quantLinear:
			w.embed = quantRows{o.m}
		}
	}
	drop("output.")
	drop("token_embd.")
	for l := range mc.Layers {
		lw, err := loadLayer(f, mc, l)
		if err != nil {
			return nil, err
		}
		w.layers = append(w.layers, lw)
		drop(fmt.Sprintf("blk.%d.", l))
	}
	drop("")
	w.fingerprint = fileFingerprint(f, mc, func(t gguf.TensorInfo) {
		if packedCopy(t) {
			f.DontNeed(t)
		}
	})
	return w, nil
}

// fileFingerprint hashes the shape and every tensor's bytes, so two workers agree
// on it exactly when they serve the same weights, whatever the file is called.
// hashed is called after each tensor's bytes are hashed.
func fileFingerprint(f *gguf.File, mc ModelConfig, hashed func(gguf.TensorInfo)) string {
	h := xxh3.New()
	fmt.Fprintf(h, "%s/%d/%d/%d/%d/%d/%d/%d/%v/%v/%v/%d;", mc.Arch, mc.Layers, mc.DModel, mc.Heads,
		mc.KVHeads, mc.HeadDim, mc.FFN, mc.VocabSize, mc.RopeTheta, mc.RopeScale, mc.NormEps, mc.ropeDims())
	if mc.arch != archBase[mc.Arch] {
		// What the file's metadata chose; Llama's and Qwen2's fingerprints stay as published.
		fmt.Fprintf(h, "%+v;", mc.arch)
	}
	for _, t := range f.Tensors() {
		fmt.Fprintf(h, "%s/%d/%v;", t.Name, t.Type, t.Dims)
		h.Write(t.Data)
		hashed(t)
	}
	return fmt.Sprintf("gguf-%s-%016x", mc.Arch, h.Sum64())
}

// loadModel resolves cfg's model and builds its weights. file is the GGUF file the
// engine opened itself (to close with the engine), nil otherwise.
func loadModel(cfg Config) (mc ModelConfig, w *weights, file *gguf.File, err error) {
	name := cfg.Model
	if name == "" {
		name = "tiny"
	}
	f := cfg.File
	if f == nil {
		if mc, ok := LookupModel(name); ok {
			return mc, newWeights(mc, cfg.Seed), nil, nil
		}
		if f, err = OpenModelFile(name); err != nil {
			return mc, nil, nil, err
		}
		file = f
	}
	defer func() {
		if err != nil && file != nil {
			_ = file.Close()
			file = nil
		}
	}()
	if mc, err = modelConfigFromGGUF(f, baseName(name)); err != nil {
		return mc, nil, file, err
	}
	if name == models.Stories260KName {
		mc.Name = name // its general.name is just "llama"
	}
	w, err = loadWeights(f, mc)
	return mc, w, file, err
}
