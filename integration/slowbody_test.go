package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client trickling its body a byte at a time is cut by the real frontend at
// --body-read-timeout with a 408, and counted.
func TestSlowBodyIsCut(t *testing.T) {
	_, url := startUp(t, "--body-read-timeout", "500ms", "--body-min-rate", "1048576")
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("%d %s, want 408 with an OpenAI error", resp.StatusCode, b)
	}
	m, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(text), "tandem_frontend_body_timeouts_total 1") {
		t.Errorf("tandem_frontend_body_timeouts_total is not 1 in /metrics")
	}
}
