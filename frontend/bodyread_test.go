package frontend

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A body trickled a byte at a time is cut at the deadline with a 408 in OpenAI's
// error shape, counted, and the connection closed; the client never hangs.
func TestTrickledBodyIsCut(t *testing.T) {
	cfg := testConfig()
	cfg.BodyReadTimeout = 300 * time.Millisecond
	cfg.BodyMinRate = 1 << 20
	f, reg := newTestFrontend(t, cfg, &fakeBackend{output: []uint32{1}})
	srv := newHTTPServer(t, f)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Nothing may hang the test: the whole exchange has 10 s.
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		body := `{"prompt":"` + strings.Repeat("a", 100000)
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response to a trickled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, "did not arrive in time") {
		t.Fatalf("%d %s, want 408 with an OpenAI error", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Error("the connection is not closed after a cut body")
	}
	if n := metricValue(t, reg, "tandem_frontend_body_timeouts_total"); n != 1 {
		t.Errorf("tandem_frontend_body_timeouts_total = %v, want 1", n)
	}
	// A body that arrives in time is served as before.
	ok, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	ok.Body.Close()
	if ok.StatusCode != 200 {
		t.Errorf("a prompt sent at once: %d", ok.StatusCode)
	}
}
