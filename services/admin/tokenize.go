package admin

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/models"
	"github.com/tandem-serve/tandem/tokenizer"
)

// TokenizeOptions say whose tokenizer to use and how.
type TokenizeOptions struct {
	// Model is models.Stories260KName, a GGUF file, or a random shape (whose
	// tokenizer is cl100k_base); HF, when set, is a Hugging Face tokenizer.json
	// used instead.
	Model, HF string
	// IDsOnly prints the ids alone; Special turns special tokens' text into their
	// ids; BOS puts BOS first when the model expects one.
	IDsOnly, Special, BOS bool
}

// Tokenize prints on w the token ids (and pieces) a model's tokenizer makes of
// text: what a worker serving that model would count.
func Tokenize(text string, o TokenizeOptions, w io.Writer) error {
	tok, err := openTokenizer(o.Model, o.HF)
	if err != nil {
		return err
	}
	ids := tok.Encode(text)
	if o.Special {
		ids = tok.EncodeSpecial(text)
	}
	if b, ok := tok.BOS(); o.BOS && ok && tok.AddBOS() && (len(ids) == 0 || ids[0] != b) {
		ids = append([]uint32{b}, ids...)
	}
	if o.IDsOnly {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = fmt.Sprint(id)
		}
		_, err := fmt.Fprintln(w, strings.Join(s, " "))
		return err
	}
	for _, id := range ids {
		if _, err := fmt.Fprintf(w, "%d\t%q\n", id, tok.Piece(id)); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "%d tokens (%s)\n", len(ids), tok.Name())
	return err
}

func openTokenizer(model, hf string) (tokenizer.Tokenizer, error) {
	if hf != "" {
		b, err := os.ReadFile(hf)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer: %w", err)
		}
		return tokenizer.FromHuggingFace(b)
	}
	if native.IsRandom(model) {
		return tokenizer.CL100K()
	}
	f, err := models.Open(model)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	defer f.Close()
	return tokenizer.FromGGUF(f)
}
