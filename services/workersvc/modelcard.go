package workersvc

import (
	"fmt"
	"os"
	"strings"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/gguf"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// modelFiler is an engine serving a GGUF file (native, on a real model).
type modelFiler interface {
	ModelFile() *gguf.File
}

// modelCard is what this worker publishes about its model: the frontend takes the
// tokenizer and chat template from it, the router the fingerprint.
func modelCard(cfg Config, eng engine.Engine) (*workerv1.ModelCard, error) {
	info := eng.Info()
	card := &workerv1.ModelCard{
		Model:         info.Model,
		Fingerprint:   info.Layout.Fingerprint,
		ContextLength: uint32(info.ContextLength),
		BlockSize:     uint32(info.Layout.BlockSize),
		VocabSize:     uint32(info.VocabSize),
	}
	var file *gguf.File
	if mf, ok := eng.(modelFiler); ok {
		file = mf.ModelFile()
	}
	switch {
	case isGPU(info.Engine):
		// The engine server's own model id; the tokenizer comes from --tokenizer.
	case file == nil:
		// The random-weight shapes and the sim engine speak cl100k_base; their ids
		// keep the names clients have used for them.
		card.Model = "tandem-" + info.Model
		card.Tokenizer = &workerv1.ModelCard_TokenizerName{TokenizerName: "cl100k_base"}
	default:
		if cfg.Tokenizer == "" {
			// Found now rather than by a frontend that can never serve the model.
			tok, err := tokenizer.FromGGUF(file)
			if err != nil {
				return nil, fmt.Errorf("the model file has no tokenizer tandem can use (%w); give its tokenizer.json with --tokenizer", err)
			}
			if tok.VocabSize() > info.VocabSize {
				return nil, fmt.Errorf("the model's tokenizer has %d tokens but its embedding only %d", tok.VocabSize(), info.VocabSize)
			}
		}
		card.Tokenizer, card.ChatTemplate = ggufTokenizer(file)
	}
	if cfg.Tokenizer != "" {
		// Validate checked it parses; what the frontend gets is the file as given
		// (a GGUF's tokenizer metadata only), so its bytes are all the card needs.
		b, err := os.ReadFile(cfg.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer: %w", err)
		}
		card.Tokenizer = &workerv1.ModelCard_TokenizerJson{TokenizerJson: b}
		if f, err := gguf.Parse(b); err == nil {
			card.Tokenizer, card.ChatTemplate = ggufTokenizer(f)
		}
	}
	if cfg.ChatTemplate != "" {
		b, err := os.ReadFile(cfg.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
		card.ChatTemplate = string(b)
	}
	if cfg.ServedName != "" {
		card.Model = cfg.ServedName
	}
	return card, nil
}

// ggufTokenizer is a GGUF's tokenizer as the card carries it: its general.* and
// tokenizer.* metadata, and its chat template.
func ggufTokenizer(file *gguf.File) (*workerv1.ModelCard_TokenizerGguf, string) {
	tpl, _ := file.String("tokenizer.chat_template")
	return &workerv1.ModelCard_TokenizerGguf{TokenizerGguf: file.MetadataOnly(func(key string) bool {
		return strings.HasPrefix(key, "tokenizer.") && key != "tokenizer.chat_template" || strings.HasPrefix(key, "general.")
	})}, tpl
}
