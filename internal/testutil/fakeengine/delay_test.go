package fakeengine

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FirstTokenDelay holds back the first token, and only the first: the engine's
// TTFT, apart from the gap between tokens. Only lower bounds are checked, which
// a busy machine cannot break.
func TestFirstTokenDelay(t *testing.T) {
	s := (&Server{FirstTokenDelay: 300 * time.Millisecond}).Start(t)
	start := time.Now()
	body := `{"model":"fake-model","prompt":[1,2,3],"max_tokens":3,"stream":true}`
	resp, err := http.Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if len(events) == 0 {
				if took := time.Since(start); took < 300*time.Millisecond {
					t.Fatalf("first token after %v, before the 300ms first-token delay", took)
				}
			}
			events = append(events, line)
		}
	}
	// Three tokens, the usage chunk and [DONE].
	if len(events) != 5 || events[4] != "[DONE]" {
		t.Fatalf("events %q, want 3 tokens, usage and [DONE]", events)
	}
}
