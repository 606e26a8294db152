package fakeengine

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A test that never reads Cancelled must not stall the server: before, the 65th
// undrained cancellation blocked its handler forever.
func TestCancellationsBeyondTheBufferDoNotBlock(t *testing.T) {
	s := (&Server{TokenDelay: 50 * time.Millisecond}).Start(t)
	const n = 80
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"model":"fake-model","prompt":[1,2,3],"max_tokens":8,"stream":true}`
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/completions", strings.NewReader(body))
		req.Header.Set("X-Request-Id", fmt.Sprintf("r%d", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Read the first event, so the handler is inside its token loop.
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.CancelledIDs()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d cancellations recorded: a handler is stuck", len(s.CancelledIDs()), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(s.Cancelled()); got != cap(s.gone) {
		t.Errorf("channel holds %d ids, want its buffer full (%d)", got, cap(s.gone))
	}
}
