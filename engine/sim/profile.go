package sim

import (
	"fmt"
	"slices"
	"strings"
)

// Profile is the timing of one simulated device running one model. docs/SIM.md
// gives each profile's sources and how its figures were derived.
type Profile struct {
	Name string
	// Prefill of T tokens alone on the device, in ms: PrefillA*T^2 + PrefillB*T + PrefillC.
	// A chunk of n tokens after o already computed costs PrefillA*((o+n)^2-o^2) +
	// PrefillB*n, so a prompt's chunks sum to its unchunked time plus each step's
	// PrefillC.
	PrefillA, PrefillB, PrefillC float64
	// A decode step alone, in ms, at KV pool usage u in [0,1]:
	// max(1, DecodeA*u^2 + DecodeB*u + DecodeC).
	DecodeA, DecodeB, DecodeC float64
	// KVBytesPerToken is the modelled model's KV per token (bf16), which a remote
	// prefill moves over the link.
	KVBytesPerToken int
	// KVTokens is the device's KV pool in tokens, when the flags leave it unset.
	KVTokens int
	// MaxNumSeqs and MaxBatchedTokens are the scheduler's limits per step, as
	// vLLM's max_num_seqs and max_num_batched_tokens.
	MaxNumSeqs, MaxBatchedTokens int
}

// decodeMS is a decode step's time alone at KV usage u.
func (p *Profile) decodeMS(u float64) float64 {
	return max(1, p.DecodeA*u*u+p.DecodeB*u+p.DecodeC)
}

// ChunkMS is the variable part of prefilling n tokens after o already computed.
// Exported for bench bound, which prices a trace's prefills with it.
func (p *Profile) ChunkMS(o, n int) float64 {
	a, b := float64(o), float64(o+n)
	return p.PrefillA*(b*b-a*a) + p.PrefillB*float64(n)
}

// StepMS is the time of one engine step on the device: d sequences decoding one
// token each at KV usage u, beside prefill chunks whose variable cost (ChunkMS,
// summed) is chunks. A step that holds both pays its fixed cost once: the larger
// of the decode step's fixed part (DecodeC, the weights read once per step) and
// the prefill's (PrefillC), plus the prefill's compute and the decode's KV reads.
// Decode tokens add no compute of their own: riding a compute-bound prefill chunk
// is what Sarathi-Serve's hybrid batches show they cost (docs/SIM.md).
func (p *Profile) StepMS(d int, u float64, prefill bool, chunks float64) float64 {
	switch {
	case d == 0 && !prefill:
		return 0
	case !prefill:
		return p.decodeMS(u)
	case d == 0:
		return chunks + p.PrefillC
	}
	fixed := p.decodeMS(0)
	kv := max(0, p.decodeMS(u)-fixed)
	return max(fixed, p.PrefillC) + chunks + kv
}

// Profiles are the named timings --sim-profile picks from; docs/SIM.md gives
// their sources.
func Profiles() []Profile {
	return []Profile{
		{
			// Dynamo's mocker, fitted to a GPU (REFERENCE.md); its defaults for
			// the pool and the scheduler; KV per token of Llama-3.1-8B.
			Name:     "mocker",
			PrefillA: 4.209989e-7, PrefillB: 1.518344e-2, PrefillC: 16.50142,
			DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74,
			KVBytesPerToken: llama8BKVBytes, KVTokens: 16384 * 64,
			MaxNumSeqs: 256, MaxBatchedTokens: 8192,
		},
		h100Llama8B(),
	}
}

// H100 SXM (NVIDIA's datasheet: 989 TFLOPS dense BF16, 3.35 TB/s HBM3) running
// Llama-3.1-8B in bf16 (8.03e9 parameters, 32 layers of 32 query heads of 128).
const (
	h100FLOPS, h100Bandwidth = 989e12, 3.35e12
	llama8BParams            = 8.03e9
	llama8BLayers, llama8BQ  = 32, 32 * 128
	// The fractions of peak a serving engine attains: compute in a prefill (MFU)
	// and memory bandwidth in a decode step (MBU). Assumed, not measured here;
	// docs/SIM.md says where they come from and what they change.
	h100MFU, h100MBU = 0.6, 0.7
	// KV pool: 90 % of 80 GB (vLLM's gpu_memory_utilization), less the weights
	// and about 4 GB of activations and graphs, in whole 64-token blocks.
	h100KVBytes = 52e9
)

// h100Llama8B is a roofline of one H100 running Llama-3.1-8B: a decode step
// reads the weights once and the KV in use; a prefill token costs the weights'
// two FLOPs per parameter, and each causal (query, key) pair attention's four
// FLOPs per head dimension per layer (QK^T and PV), at the attained fraction of peak.
func h100Llama8B() Profile {
	weightsMS := 2 * llama8BParams / (h100Bandwidth * h100MBU) * 1e3
	pool := h100KVBytes // a variable: the quotient is no whole constant
	kvTokens := int(pool/llama8BKVBytes) / 64 * 64
	return Profile{
		Name:     "h100-llama8b",
		PrefillA: 4 * llama8BLayers * llama8BQ / 2 / (h100FLOPS * h100MFU) * 1e3,
		PrefillB: 2 * llama8BParams / (h100FLOPS * h100MFU) * 1e3,
		PrefillC: weightsMS,
		// At u = 1 the step reads the whole pool's KV besides the weights.
		DecodeB:         float64(kvTokens) * llama8BKVBytes / (h100Bandwidth * h100MBU) * 1e3,
		DecodeC:         weightsMS,
		KVBytesPerToken: llama8BKVBytes, KVTokens: kvTokens,
		// vLLM's defaults for an OpenAI server.
		MaxNumSeqs: 256, MaxBatchedTokens: 8192,
	}
}

// ProfileNames lists the profiles, for flags' help and errors.
func ProfileNames() []string {
	var names []string
	for _, p := range Profiles() {
		names = append(names, p.Name)
	}
	return names
}

// ProfileNamed returns the profile called name.
func ProfileNamed(name string) (Profile, error) {
	ps := Profiles()
	if i := slices.IndexFunc(ps, func(p Profile) bool { return p.Name == name }); i >= 0 {
		return ps[i], nil
	}
	return Profile{}, fmt.Errorf("sim profile %q: want one of %s", name, strings.Join(ProfileNames(), ", "))
}

// Llama-3.1 KV per token in bf16: layers x 2 (K and V) x 8 KV heads x 128 x 2 bytes.
const (
	llama8BKVBytes  = 32 * 2 * 8 * 128 * 2 // 128 KiB
	llama70BKVBytes = 80 * 2 * 8 * 128 * 2 // 320 KiB
)

// Link is how KV moves from a prefill worker's device to a decode worker's: a
// transfer of B bytes takes Latency + B / Bandwidth.
type Link struct {
	Name      string
	LatencyMS float64
	Bandwidth float64 // bytes per second
}

// TransferMS is the modelled time to move the KV of tokens tokens.
func (l Link) TransferMS(tokens, kvBytesPerToken int) float64 {
	if tokens <= 0 {
		return 0
	}
	ms := l.LatencyMS
	if l.Bandwidth > 0 {
		ms += float64(tokens) * float64(kvBytesPerToken) / l.Bandwidth * 1e3
	}
	return ms
}

// Links are the named transfer paths --sim-link picks from; docs/SIM.md gives
// the sources of their figures.
func Links() []Link {
	return []Link{
		// GPUDirect RDMA over RoCE, one 400 Gb/s NIC per GPU: Mooncake's published
		// transfer-engine figure (190 GB/s over 8 x 400 Gb/s) per GPU, and the
		// intercept of its vLLM 1P1D transfer times.
		{Name: "rdma", LatencyMS: 0.5, Bandwidth: 190e9 / 8},
		// TCP over the same NICs: the same source's ~41 GB/s over 8, per GPU.
		{Name: "tcp", LatencyMS: 0.5, Bandwidth: 41e9 / 8},
		// No transfer time: the comparison of the step model alone.
		{Name: "none"},
	}
}

// LinkNamed returns the link called name.
func LinkNamed(name string) (Link, error) {
	ls := Links()
	if i := slices.IndexFunc(ls, func(l Link) bool { return l.Name == name }); i >= 0 {
		return ls[i], nil
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	return Link{}, fmt.Errorf("sim link %q: want one of %s", name, strings.Join(names, ", "))
}
