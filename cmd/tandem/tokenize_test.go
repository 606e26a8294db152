package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ids", "--bos", "Once upon a time,"}, "1 403 407 261 378 432\n"},
		{[]string{"Once"}, "403\t\"▁Once\"\n1 tokens (llama-spm)\n"},
		{[]string{"--model", "tiny", "--ids", "Hello world"}, "9906 1917\n"},
	} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), append([]string{"tokenize"}, c.args...), envOf(nil), &out, &errb); err != nil {
			t.Fatalf("%v: %v (%s)", c.args, err, errb.String())
		}
		if out.String() != c.want {
			t.Errorf("%v: %q, want %q", c.args, out.String(), c.want)
		}
	}
	for _, args := range [][]string{{}, {"--model", "/no/such.gguf", "x"}, {"--tokenizer", "/no/such.json", "x"}} {
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"tokenize"}, args...), envOf(nil), &out, &out); err == nil ||
			!strings.Contains(err.Error(), "tokenize") && !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %v, want an error naming what is wrong", args, err)
		}
	}
}
