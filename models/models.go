// Package models holds the model files embedded in the tandem binary, so that
// `tandem up` serves a real trained model with nothing to download.
package models

import _ "embed"

// Stories260K is Karpathy's tinyllamas stories260K (trained on TinyStories), as GGUF v3
// converted by ggml-org: llama architecture, 5 layers, d_model 64, 512-token
// SentencePiece vocabulary, F32. MIT licence; see NOTICE at the repository root.
//
//go:embed stories260K.gguf
var Stories260K []byte

// Stories260KName is the name `--model` accepts for it, and its served model id.
const Stories260KName = "stories260K"
