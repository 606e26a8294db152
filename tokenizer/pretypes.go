package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// The pattern lists of llama.cpp's pre-tokenizers (llm_tokenizer_bpe), spelled as
// llama.cpp spells them: it picks its hand-written code by the exact text of a pattern.
const (
	llamaGPT2   = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
	llamaLlama3 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]" +
		"+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	// llamaBloom is BLOOM's and Poro's: anything but whitespace and a few
	// punctuation marks, with a space before it.
	llamaBloom = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
)

// Pre-tokenizer families, named by the tokenizer.ggml.pre name llama.cpp gives the
// first model of each; Vocab.Name reports the family.
const (
	preDefault       = "default"
	preGPT2          = "gpt-2"
	preLlama3        = "llama-bpe"
	preDBRX          = "dbrx"
	preQwen2         = "qwen2"
	preSmolLM        = "smollm"
	preDeepSeekLLM   = "deepseek-llm"
	preDeepSeekCoder = "deepseek-coder"
	preDeepSeekV3    = "deepseek-v3"
	preFalcon        = "falcon"
	preBloom         = "bloom"
	preViking        = "viking"
	preTekken        = "tekken"
	preChameleon     = "chameleon"
)

// preFamilyInfo is what a family means besides its splitter.
type preFamilyInfo struct {
	// ignoreMerges takes a whole pre-tokenized word that is a token as that token.
	ignoreMerges bool
	// addBOS is llama.cpp's default for tokenizer.ggml.add_bos_token.
	addBOS bool
	// patterns are llama.cpp's pattern list; nil for the families with their own
	// splitter (default, gpt-2, llama-bpe, qwen2, smollm).
	patterns []string
}

var preFamilies = map[string]preFamilyInfo{
	preDefault: {},
	preGPT2:    {},
	preLlama3:  {ignoreMerges: true, addBOS: true},
	// Llama 3's pattern without its other rules.
	preDBRX:   {patterns: []string{llamaLlama3}},
	preQwen2:  {},
	preSmolLM: {},
	preDeepSeekLLM: {patterns: []string{
		"[\r\n]",
		"\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377" +
			"\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-" +
			"\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-" +
			"\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-" +
			"\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115" +
			"\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b" +
			"\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf" +
			"\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb" +
			"\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
		"\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
		"\\s+$",
		"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
		"\\p{N}+",
	}},
	preDeepSeekCoder: {patterns: []string{
		"[\r\n]",
		"\\s?\\p{L}+",
		"\\s?\\p{P}+",
		"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
		"\\p{N}",
	}},
	preDeepSeekV3: {patterns: []string{
		"\\p{N}{1,3}",
		"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
		"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
	}},
	preFalcon: {patterns: []string{
		"[\\p{P}\\$\\+<=>\\^~\\|`]+",
		llamaGPT2,
		"[0-9][0-9][0-9]",
	}},
	preBloom:  {patterns: []string{llamaBloom}},
	preViking: {patterns: []string{llamaBloom, "\\p{N}"}},
	// Mistral's Tekken: the pattern of tokenizer.json, as llama.cpp adapts it.
	preTekken: {ignoreMerges: true, addBOS: true, patterns: []string{
		"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[" +
			"\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	}},
	preChameleon: {addBOS: true, patterns: []string{
		"<sentinel:[0-9]+>",
		"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
		"([\\t\\n]|    |  )",
		"\\p{N}",
		"[\\p{P}!-/:-@\\[-`{-~]",
		llamaGPT2,
	}},
}

// preAliases maps each tokenizer.ggml.pre name llama.cpp knows to its family.
var preAliases = map[string]string{
	"default": preDefault,
	// GPT-2's pattern.
	"gpt-2": preGPT2, "gpt2": preGPT2, "phi-2": preGPT2, "jina-es": preGPT2, "jina-de": preGPT2,
	"gigachat": preGPT2, "jina-v1-en": preGPT2, "jina-v2-es": preGPT2, "jina-v2-de": preGPT2,
	"jina-v2-code": preGPT2, "roberta-bpe": preGPT2, "mpt": preGPT2, "olmo": preGPT2, "jais": preGPT2,
	"a.x-4.0": preGPT2, "mellum": preGPT2, "modern-bert": preGPT2, "exaone4": preGPT2,
	// Llama 3's pattern (merges ignored for whole-word tokens, BOS added by default).
	"llama-bpe": preLlama3, "llama3": preLlama3, "llama-v3": preLlama3, "falcon3": preLlama3,
	"falcon-h1": preLlama3, "pixtral": preLlama3, "midm-2.0": preLlama3, "lfm2": preLlama3,
	// Llama 3's pattern alone.
	"dbrx": preDBRX, "smaug-bpe": preDBRX, "chatglm-bpe": preDBRX,
	// Qwen2's pattern: Llama 3's with single digits.
	"qwen2": preQwen2, "deepseek-r1-qwen": preQwen2, "megrez": preQwen2, "stablelm2": preQwen2,
	// Every digit alone, then GPT-2's pattern (SmolLM, StarCoder).
	"smollm": preSmolLM, "starcoder": preSmolLM, "refact": preSmolLM, "command-r": preSmolLM,
	"codeshell": preSmolLM, "exaone": preSmolLM, "minerva-7b": preSmolLM, "mellum2": preSmolLM,
	"deepseek-llm": preDeepSeekLLM, "deepseek-coder": preDeepSeekCoder, "deepseek-v3": preDeepSeekV3,
	"falcon": preFalcon, "bloom": preBloom, "poro-chat": preBloom, "gpt3-finnish": preBloom,
	"viking": preViking, "tekken": preTekken, "chameleon": preChameleon,
}

// preFamily resolves a tokenizer.ggml.pre name.
func preFamily(pre string) (string, error) {
	if pre == "" {
		// llama.cpp falls back to "default" for files that predate the key.
		return preDefault, nil
	}
	f, ok := preAliases[pre]
	if !ok {
		return "", fmt.Errorf("tokenizer: pre-tokenizer %q is not supported (tandem knows llama.cpp's: %s)", pre, knownPres())
	}
	return f, nil
}

func knownPres() string {
	names := make([]string, 0, len(preAliases))
	for n := range preAliases {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// splitters holds each family's splitter, built once: the pattern lists compile
// their regular expressions.
var splitters sync.Map // family -> splitter

func splitterFor(family string) splitter {
	if sp, ok := splitters.Load(family); ok {
		return sp.(splitter)
	}
	sp := buildSplitter(family)
	splitters.Store(family, sp)
	return sp
}

func buildSplitter(family string) splitter {
	if ps := preFamilies[family].patterns; ps != nil {
		return llamaChain(ps...)
	}
	switch family {
	case preGPT2:
		return splitGPT2
	case preLlama3:
		return func(s string, emit func(string)) { splitLlama3(s, 3, emit) }
	case preQwen2:
		return func(s string, emit func(string)) { splitLlama3(s, 1, emit) }
	case preSmolLM:
		return chain(splitEach(unicode.IsNumber), splitGPT2)
	}
	// llama.cpp's "default": runs of punctuation, then GPT-2's pattern, then runs of
	// digits, then ASCII digits in threes.
	return chain(splitRuns(isDefaultPunct), splitGPT2, splitRuns(isNumber), splitASCIIDigitTriples)
}
