package testmodel

import (
	_ "embed"
	"strconv"
	"strings"
)

//go:embed stories260K-greedy.txt
var storiesGreedy string

// Stories260KGreedy is llama2.c's published reference for stories260K: the first
// tokens it draws greedily from BOS and the text they spell. A correct loader,
// tokenizer and forward pass reproduce them exactly at temperature 0.
func Stories260KGreedy() (tokens []uint32, text string) {
	for line := range strings.SplitSeq(storiesGreedy, "\n") {
		switch key, val, _ := strings.Cut(line, ": "); key {
		case "tokens":
			for f := range strings.FieldsSeq(val) {
				id, err := strconv.ParseUint(f, 10, 32)
				if err != nil {
					panic("testmodel: stories260K-greedy.txt: " + err.Error())
				}
				tokens = append(tokens, uint32(id))
			}
		case "text":
			text = val
		}
	}
	if len(tokens) == 0 || text == "" {
		panic("testmodel: stories260K-greedy.txt holds no tokens or text")
	}
	return tokens, text
}
