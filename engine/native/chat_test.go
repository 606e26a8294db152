package native

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/chattemplate"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/tokenizer"
)

// What the frontend does with each committed model's metadata (the tokenizer and
// tokenizer.chat_template a worker publishes in its model card): the chat template
// compiles with the vocabulary's BOS and EOS, the prompt ends with the family's
// generation prompt, its control tokens reach the model as their ids, and the
// family's end-of-turn token stops generation. The vocabularies are SentencePiece
// stand-ins (real Qwen3, OLMo 2 and Granite vocabularies are byte-level BPE); what
// is checked is the template and its control tokens.
func TestArchChatTemplates(t *testing.T) {
	genPrompt := map[string]string{
		"qwen3": "<|im_start|>assistant\n", "phi3": "<|assistant|>\n", "gemma2": "<start_of_turn>model\n",
		"gemma3": "<start_of_turn>model\n", "olmo2": "<|assistant|>\n", "granite": "<|start_of_role|>assistant<|end_of_role|>",
	}
	endOfTurn := map[string]string{
		"qwen3": "<|im_end|>", "phi3": "<|end|>", "gemma2": "<end_of_turn>", "gemma3": "<end_of_turn>",
		"olmo2": "<|endoftext|>", "granite": "<|end_of_text|>",
	}
	msgs := []chattemplate.Message{{Role: "user", Content: "Hello"}, {Role: "assistant", Content: "Hi there"},
		{Role: "user", Content: "Who are you"}}
	for _, am := range archModels {
		arch := am.shape.Arch
		t.Run(arch, func(t *testing.T) {
			b, err := os.ReadFile(archModelPath(arch, ".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			full, err := gguf.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			// The frontend sees only the metadata the worker's model card carries.
			f, err := gguf.Parse(full.MetadataOnly(func(k string) bool { return strings.HasPrefix(k, "tokenizer.") }))
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			src, err := full.String("tokenizer.chat_template")
			if err != nil {
				t.Fatal(err)
			}
			opts := chattemplate.Options{EOSToken: tok.Piece(tok.EOS())}
			if bos, ok := tok.BOS(); ok {
				opts.BOSToken = tok.Piece(bos)
			}
			tmpl, err := chattemplate.New(src, opts)
			if err != nil {
				t.Fatalf("the %s template does not compile: %v", arch, err)
			}
			text, err := tmpl.Render(msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(text, genPrompt[arch]) {
				t.Errorf("prompt %q does not end with the generation prompt %q", text, genPrompt[arch])
			}
			ids := tok.EncodeSpecial(text)
			for _, s := range am.specials {
				if !strings.Contains(text, s) {
					continue
				}
				id := -1
				for i := range tok.VocabSize() {
					if tok.Piece(uint32(i)) == s {
						id = i
					}
				}
				if id < 0 || !slices.Contains(ids, uint32(id)) {
					t.Errorf("control token %s (id %d) is not one token of the prompt %v", s, id, ids)
				}
			}
			stops := tok.StopTokens()
			if !slices.ContainsFunc(stops, func(id uint32) bool { return tok.Piece(id) == endOfTurn[arch] }) {
				t.Errorf("%s does not stop generation (stop tokens %v)", endOfTurn[arch], stops)
			}
		})
	}
}
