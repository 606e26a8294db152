package frontendsvc

import (
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/frontend"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/models"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// storiesCard is the card a worker serving the embedded model publishes.
func storiesCard(t *testing.T, template string) *workerv1.ModelCard {
	t.Helper()
	f, err := gguf.Parse(models.Stories260K)
	if err != nil {
		t.Fatal(err)
	}
	meta := f.MetadataOnly(func(k string) bool { return strings.HasPrefix(k, "tokenizer.") })
	return &workerv1.ModelCard{Model: "stories260K", Fingerprint: "fp", ContextLength: 2048, BlockSize: 16, VocabSize: 512,
		Tokenizer: &workerv1.ModelCard_TokenizerGguf{TokenizerGguf: meta}, ChatTemplate: template}
}

func TestModelFromCard(t *testing.T) {
	m, _, err := modelFromCard(storiesCard(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "stories260K" || m.ContextLength != 2048 || m.Tokenizer.VocabSize() != 512 || m.Template.Name() != "fallback" {
		t.Fatalf("model %+v, template %s", m, m.Template.Name())
	}
	// "Once upon a time," as llama2.c's reference tokenizes it.
	if ids := m.Tokenizer.Encode("Once upon a time,"); len(ids) != 5 || ids[0] != 403 || ids[4] != 432 {
		t.Errorf("Encode = %v", ids)
	}

	// A model's own template renders with its tokenizer's BOS text.
	m, _, err = modelFromCard(storiesCard(t, "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := m.Template.Apply([]frontend.Message{{Role: "developer", Content: "be kind"}, {Role: "user", Content: "hi"}})
	if err != nil || text != "<s>[system] be kind\n[user] hi\n" {
		t.Errorf("rendered %q, %v", text, err)
	}

	cl, _, err := modelFromCard(&workerv1.ModelCard{Model: "tandem-tiny", ContextLength: 4096, BlockSize: 16,
		Tokenizer: &workerv1.ModelCard_TokenizerName{TokenizerName: "cl100k_base"}})
	if err != nil || cl.Tokenizer.Name() != "cl100k_base" || cl.Template.Name() != "chatml" {
		t.Fatalf("cl100k card: %+v, %v", cl, err)
	}

	for name, card := range map[string]*workerv1.ModelCard{
		"no tokenizer":    {Model: "x", ContextLength: 10},
		"unknown builtin": {Model: "x", Tokenizer: &workerv1.ModelCard_TokenizerName{TokenizerName: "o200k"}},
		"garbage gguf":    {Model: "x", Tokenizer: &workerv1.ModelCard_TokenizerGguf{TokenizerGguf: []byte("GGUF....")}},
	} {
		if _, _, err := modelFromCard(card); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A template tandem cannot compile leaves chats to the fallback, and says so.
	m, warn, err := modelFromCard(storiesCard(t, "{% for %}"))
	if err != nil || warn == nil || m.Template.Name() != "fallback" {
		t.Errorf("uncompilable template: %v, %v, %s", warn, err, m.Template.Name())
	}
}
