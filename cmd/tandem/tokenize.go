package main

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/models"
	"github.com/tandem-serve/tandem/services/admin"
)

// runTokenize prints the token ids (and pieces) a model's tokenizer makes of a
// text: what a worker serving that model would count.
func runTokenize(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokenize", "tokenize [flags] TEXT...", stderr)
	var o admin.TokenizeOptions
	fs.StringVar(&o.Model, "model", models.Stories260KName, "the model whose tokenizer to use: "+models.Stories260KName+
		", a GGUF file, or a random shape ("+strings.Join(native.Models(), ", ")+": cl100k_base)")
	fs.StringVar(&o.HF, "tokenizer", "", "a Hugging Face tokenizer.json to use instead of --model's")
	fs.BoolVar(&o.IDsOnly, "ids", false, "print only the ids, space-separated")
	fs.BoolVar(&o.Special, "special", false, "turn the text of special tokens (e.g. <|im_start|>) into their ids, as a rendered chat template is")
	fs.BoolVar(&o.BOS, "bos", false, "put BOS first when the model expects one, as a prompt gets")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("tokenize: give the text to tokenize")
	}
	return admin.Tokenize(strings.Join(fs.Args(), " "), o, stdout)
}
