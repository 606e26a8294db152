package native

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"

	"github.com/tandem-serve/tandem/gguf"
)

// normPlacement says where a block's RMS norms sit around attention and the MLP.
type normPlacement int

const (
	normPre      normPlacement = iota // before each (Llama)
	normSandwich                      // before and after each (Gemma 2 and 3)
	normPost                          // after each only (OLMo 2)
)

// qkNorm is the RMS norm some families apply to queries and keys before rope.
type qkNorm int

const (
	qkNone    qkNorm = iota
	qkPerHead        // one head-dim weight shared by every head (Qwen3, Gemma 3)
	qkWhole          // over all heads of a token at once (OLMo 2)
)

// archSpec is what an architecture's forward pass does differently from Llama's.
// The zero value is Llama with halves rope; every field's zero means "as Llama".
type archSpec struct {
	rope        ropeStyle
	qkvBias     bool // Q, K and V biases (Qwen2)
	fused       bool // one attn_qkv matrix and a gate|up ffn_up matrix (Phi-3)
	qkNorm      qkNorm
	norms       normPlacement
	gelu        bool    // GeGLU with tanh-approximated GELU instead of SwiGLU (Gemma)
	embedScale  float32 // the embedding is multiplied by it; 0: 1
	resScale    float32 // each branch's output is multiplied by it before the residual add (Granite); 0: 1
	attnScale   float32 // scores are q.k times it; 0: 1/sqrt(head dim)
	attnSoftcap float32 // scores become c*tanh(s/c) (Gemma 2); 0: none
	finalCap    float32 // logits become c*tanh(l/c) (Gemma 2); 0: none
	logitScale  float32 // logits are divided by it (Granite); 0: none
	window      int     // sliding-window span in positions, the query's own included; 0: none
	swaPattern  int     // every swaPattern-th layer attends to everything; 0: every layer slides
	localTheta  float64 // rope base of the sliding layers, which are unscaled (Gemma 3); 0: as the others
}

// sliding reports whether layer l attends only to the last window positions.
func (a archSpec) sliding(l int) bool {
	return a.window > 0 && (a.swaPattern == 0 || (l+1)%a.swaPattern != 0)
}

// archBase lists the architectures the forward pass implements and what is fixed
// by the family; readArch adds what the file says.
var archBase = map[string]archSpec{
	"llama":   {rope: ropeAdjacent},
	"granite": {rope: ropeAdjacent},
	"qwen2":   {rope: ropeHalves, qkvBias: true},
	"qwen3":   {rope: ropeHalves, qkNorm: qkPerHead},
	"phi3":    {rope: ropeHalves, fused: true},
	"gemma2":  {rope: ropeHalves, norms: normSandwich, gelu: true, swaPattern: 2},
	"gemma3":  {rope: ropeHalves, norms: normSandwich, gelu: true, swaPattern: 6, qkNorm: qkPerHead, localTheta: 10000},
	"olmo2":   {rope: ropeHalves, norms: normPost, qkNorm: qkWhole},
}

// supportedArchs names them for error messages, in a stable order.
func supportedArchs() string {
	names := make([]string, 0, len(archBase))
	for a := range archBase {
		names = append(names, a)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// readArch fills in the file-dependent parts of mc.arch. It runs after the common
// hyperparameters are read, and follows llama.cpp where the file is silent.
func readArch(f *gguf.File, mc *ModelConfig) error {
	a := archBase[mc.Arch]
	var errs []error
	key := func(k string) string { return mc.Arch + "." + k }
	float := func(k string, def float64, required bool) float32 {
		v, err := f.Float(key(k))
		if errors.Is(err, gguf.ErrMissing) && !required {
			return float32(def)
		} else if err != nil {
			errs = append(errs, err)
		}
		return float32(v)
	}
	window := func(def int, required bool) int {
		v, err := f.Uint(key("attention.sliding_window"))
		if errors.Is(err, gguf.ErrMissing) && !required {
			return def
		} else if err != nil {
			errs = append(errs, err)
		}
		return int(v)
	}
	switch mc.Arch {
	case "granite":
		a.embedScale = float("embedding_scale", 0, true)
		a.resScale = float("residual_scale", 0, true)
		a.attnScale = float("attention.scale", 0, true)
		a.logitScale = float("logit_scale", 0, true)
	case "phi3":
		// Phi-4 says 0: no window.
		a.window = window(0, true)
		for _, t := range []string{"rope_factors_long.weight", "rope_factors_short.weight"} {
			if _, ok := f.Tensor(t); ok {
				errs = append(errs, fmt.Errorf("%s: Phi-3's LongRoPE (the 128k-context models) is not supported", t))
			}
		}
	case "gemma2", "gemma3":
		a.embedScale = float32(math.Sqrt(float64(mc.DModel)))
		// The 27B models scale queries by 1/sqrt(d_model/heads) (their
		// query_pre_attn_scalar), the others by 1/sqrt(head dim). The file does not
		// say which; llama.cpp tells them apart by their layer count, as here.
		if mc.Arch == "gemma2" && mc.Layers == 46 || mc.Arch == "gemma3" && mc.Layers == 62 {
			a.attnScale = float32(1 / math.Sqrt(float64(mc.DModel/mc.Heads)))
		}
		if mc.Arch == "gemma2" {
			a.window = window(4096, false)
			a.attnSoftcap = float("attn_logit_softcapping", 50, false)
			a.finalCap = float("final_logit_softcapping", 30, false)
		} else {
			a.window = window(0, true)
			a.finalCap = float("final_logit_softcapping", 0, false)
		}
	}
	if a.window < 0 || a.attnSoftcap < 0 || a.finalCap < 0 {
		errs = append(errs, fmt.Errorf("negative sliding window or soft cap"))
	}
	mc.arch = a
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("native: %s model: %w", mc.Arch, err)
	}
	return nil
}

// loadLayer reads block l's weights, in the layout the forward pass computes with
// whatever the family's file layout.
func loadLayer(f *gguf.File, mc ModelConfig, l int) (layerWeights, error) {
	d, hd := mc.DModel, mc.HeadDim
	qN, kvN := mc.Heads*hd, mc.KVHeads*hd
	a := mc.arch
	blk := fmt.Sprintf("blk.%d.", l)
	var lw layerWeights
	var err error
	norm := func(dst *[]float32, name string, n int) {
		if err == nil {
			*dst, err = tensorFloats(f, blk+name+".weight", n)
		}
	}
	if a.norms != normPost {
		norm(&lw.attnNorm, "attn_norm", d)
		norm(&lw.mlpNorm, "ffn_norm", d)
	}
	if a.norms != normPre {
		norm(&lw.attnPostNorm, "post_attention_norm", d)
		norm(&lw.mlpPostNorm, "post_ffw_norm", d)
	}
	switch a.qkNorm {
	case qkPerHead:
		norm(&lw.qNorm, "attn_q_norm", hd)
		norm(&lw.kNorm, "attn_k_norm", hd)
	case qkWhole:
		norm(&lw.qNorm, "attn_q_norm", qN)
		norm(&lw.kNorm, "attn_k_norm", kvN)
	}
	if err != nil {
		return lw, err
	}
	// matrices reads matrices of k inputs and the given outputs as one layer.
	matrices := func(k int, names []string, ns ...int) (linear, error) {
		ts := make([]gguf.TensorInfo, len(names))
		for i, name := range names {
			if ts[i], err = matrixTensor(f, blk+name+".weight", k, ns[i]); err != nil {
				return nil, err
			}
		}
		return linearOf(k, ts...)
	}
	if a.fused {
		// Phi-3's fused matrices have the rows in the order the pass wants them.
		lw.wqkv, err = matrices(d, []string{"attn_qkv"}, qN+2*kvN)
	} else {
		lw.wqkv, err = matrices(d, []string{"attn_q", "attn_k", "attn_v"}, qN, kvN, kvN)
	}
	if err != nil {
		return lw, err
	}
	if a.qkvBias {
		lw.qkvBias = make([]float32, 0, qN+2*kvN)
		for _, spec := range []struct {
			name string
			n    int
		}{{"attn_q", qN}, {"attn_k", kvN}, {"attn_v", kvN}} {
			b, err := tensorFloats(f, blk+spec.name+".bias", spec.n)
			if err != nil {
				return lw, err
			}
			lw.qkvBias = append(lw.qkvBias, b...)
		}
	}
	if lw.wo, err = matrices(qN, []string{"attn_output"}, d); err != nil {
		return lw, err
	}
	if a.fused {
		lw.wgu, err = matrices(d, []string{"ffn_up"}, 2*mc.FFN)
	} else {
		lw.wgu, err = matrices(d, []string{"ffn_gate", "ffn_up"}, mc.FFN, mc.FFN)
	}
	if err != nil {
		return lw, err
	}
	lw.wdown, err = matrices(mc.FFN, []string{"ffn_down"}, d)
	return lw, err
}

// LogValue lists what the file chose for the family's forward pass, for the
// engine's ready line: an operator sees the window and caps a model runs with.
func (a archSpec) LogValue() slog.Value {
	var attrs []slog.Attr
	add := func(k string, v float32) {
		if v != 0 {
			attrs = append(attrs, slog.Float64(k, float64(v)))
		}
	}
	if a.window > 0 {
		attrs = append(attrs, slog.Int("sliding_window", a.window), slog.Int("global_every", a.swaPattern))
	}
	add("attn_softcap", a.attnSoftcap)
	add("final_softcap", a.finalCap)
	add("embedding_scale", a.embedScale)
	add("residual_scale", a.resScale)
	add("attention_scale", a.attnScale)
	add("logit_scale", a.logitScale)
	return slog.GroupValue(attrs...)
}
