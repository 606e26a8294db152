// Package models holds the model files embedded in the tandem binary, so that
// `tandem up` serves a real trained model with nothing to download.
package models

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/tandem-serve/tandem/gguf"
)

// Stories260K is Karpathy's tinyllamas stories260K (trained on TinyStories), as GGUF v3
// converted by ggml-org: llama architecture, 5 layers, d_model 64, 512-token
// SentencePiece vocabulary, F32. MIT licence; see NOTICE at the repository root.
//
//go:embed stories260K.gguf
var Stories260K []byte

// Stories260KName is the name `--model` accepts for it, and its served model id.
const Stories260KName = "stories260K"

// Open resolves a model name that is not a random-weight shape: the embedded
// stories260K, or the path of a GGUF file. The caller closes the file.
func Open(name string) (*gguf.File, error) {
	if name == Stories260KName {
		return gguf.Parse(Stories260K)
	}
	if _, err := os.Stat(name); err != nil {
		return nil, fmt.Errorf("model %q is neither %s nor a readable GGUF file: %w", name, Stories260KName, err)
	}
	return gguf.Open(name)
}
