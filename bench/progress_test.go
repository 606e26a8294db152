package bench

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBarDrawsInPlaceAndEndsTheLine(t *testing.T) {
	var out syncBuffer
	b := NewBar(&out, "run")
	b.Update(Progress{Elapsed: time.Second, Done: 5, Failed: 1, InFlight: 2, Requests: 10})
	b.Close()
	s := out.String()
	if !strings.HasPrefix(s, "\rrun [") || !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 {
		t.Errorf("bar output %q: want redraws starting with \\r and one final newline", s)
	}
	last := s[strings.LastIndex(s, "\r"):]
	if !strings.Contains(last, " 50% 5/10, 2 in flight, 1 failed") || !strings.Contains(last, strings.Repeat("=", 15)+strings.Repeat(" ", 15)) {
		t.Errorf("last frame %q", last)
	}
}
