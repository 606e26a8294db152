package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/models"
	"github.com/tandem-serve/tandem/tokenizer"
)

// runTokenize prints the token ids (and pieces) a model's tokenizer makes of a
// text: what a worker serving that model would count.
func runTokenize(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokenize", "tokenize [flags] TEXT...", stderr)
	model := fs.String("model", models.Stories260KName, "the model whose tokenizer to use: "+models.Stories260KName+
		", a GGUF file, or a random shape ("+strings.Join(native.Models(), ", ")+": cl100k_base)")
	hf := fs.String("tokenizer", "", "a Hugging Face tokenizer.json to use instead of --model's")
	idsOnly := fs.Bool("ids", false, "print only the ids, space-separated")
	special := fs.Bool("special", false, "turn the text of special tokens (e.g. <|im_start|>) into their ids, as a rendered chat template is")
	bos := fs.Bool("bos", false, "put BOS first when the model expects one, as a prompt gets")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("tokenize: give the text to tokenize")
	}
	tok, err := openTokenizer(*model, *hf)
	if err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	ids := tok.Encode(text)
	if *special {
		ids = tok.EncodeSpecial(text)
	}
	if b, ok := tok.BOS(); *bos && ok && tok.AddBOS() && (len(ids) == 0 || ids[0] != b) {
		ids = append([]uint32{b}, ids...)
	}
	if *idsOnly {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = fmt.Sprint(id)
		}
		_, err := fmt.Fprintln(stdout, strings.Join(s, " "))
		return err
	}
	for _, id := range ids {
		if _, err := fmt.Fprintf(stdout, "%d\t%q\n", id, tok.Piece(id)); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, "%d tokens (%s)\n", len(ids), tok.Name())
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
