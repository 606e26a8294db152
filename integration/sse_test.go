package integration

import (
	"bufio"
	"io"
	"strings"
)

// eachSSE calls fn with the data of each server-sent event read from r, until
// [DONE], the end of r, or fn returning false. done says whether [DONE] came; err
// is the read error, if any.
func eachSSE(r io.Reader, fn func(data string) bool) (done bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return true, nil
		}
		if !fn(data) {
			return false, nil
		}
	}
	return false, sc.Err()
}

// sseChunk is what the tests read of a streamed chat completion chunk.
type sseChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Tandem *struct {
		DecodeWorker  string `json:"decode_worker"`
		PrefillPath   string `json:"prefill_path"`
		PrefillReason string `json:"prefill_reason"`
	} `json:"tandem"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}
