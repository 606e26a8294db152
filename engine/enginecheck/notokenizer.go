package enginecheck

import "github.com/tandem-serve/tandem/tokenizer"

// noTokenizer stands in when the check is given no tokenizer: the probes need
// only a vocabulary bound and no BOS (the token-mode probe then sends id 0).
type noTokenizer struct{}

var _ tokenizer.Tokenizer = noTokenizer{}

// noVocab is above every id a real model returns, so that no id is refused.
const noVocab = 1 << 30

func (noTokenizer) Name() string                     { return "none" }
func (noTokenizer) Encode(string) []uint32           { return nil }
func (noTokenizer) EncodeSpecial(string) []uint32    { return nil }
func (noTokenizer) Decode([]uint32) string           { return "" }
func (noTokenizer) TokenBytes(uint32) ([]byte, bool) { return nil, true }
func (noTokenizer) Piece(uint32) string              { return "" }
func (noTokenizer) VocabSize() int                   { return noVocab }
func (noTokenizer) BOS() (uint32, bool)              { return 0, false }
func (noTokenizer) AddBOS() bool                     { return false }
func (noTokenizer) EOS() uint32                      { return 0 }
func (noTokenizer) StopTokens() []uint32             { return nil }
func (noTokenizer) IsSpecial(uint32) bool            { return false }
