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
}

// preAliases maps each tokenizer.ggml.pre name llama.cpp knows to its family.
var preAliases = map[string]string{
	"default": preDefault,
	// GPT-2's pattern.
	"gpt-2": preGPT2, "gpt2": preGPT2, "phi-2": preGPT2, "jina-es": preGPT2, "jina-de": preGPT2,
	"gigachat": preGPT2, "jina-v1-en": preGPT2, "jina-v2-es": preGPT2, "jina-v2-de": preGPT2,
	"roberta-bpe": preGPT2, "mpt": preGPT2, "olmo": preGPT2, "jais": preGPT2,
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
