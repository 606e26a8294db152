package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// Profiles are off unless asked for; asked for, they are served until the
// process's context ends.
func TestPprof(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	c.RegisterFlags(fs, Decode)
	if err := fs.Parse(nil); err != nil || c.PprofAddr != "" {
		t.Fatalf("--pprof-addr defaults to %q (%v), want off", c.PprofAddr, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	addr, err := servePprof(ctx, "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "app.test") {
		t.Fatalf("cmdline: status %d, %q", resp.StatusCode, b)
	}
	cancel()
	for range 100 { // Close runs in AfterFunc's goroutine
		if _, err := http.Get("http://" + addr + "/debug/pprof/"); err != nil {
			return
		}
	}
	t.Fatal("profiles still served after the context ended")
}

func TestPprofBadAddr(t *testing.T) {
	_, err := servePprof(context.Background(), "nonsense", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "--pprof-addr") {
		t.Fatalf("err %v, want one naming --pprof-addr", err)
	}
}
