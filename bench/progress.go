package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Bar draws a one-line progress bar for a run, redrawn in place with \r; it is
// meant for a terminal. It is safe for concurrent use.
type Bar struct {
	w     io.Writer
	label string

	mu    sync.Mutex
	last  Progress
	start time.Time
	drawn time.Time
	stop  chan struct{}
	done  chan struct{}
}

// NewBar starts a bar on w that also redraws itself every 200ms, so a run bounded
// by time moves even while no request ends. Call Close when the run is over.
func NewBar(w io.Writer, label string) *Bar {
	b := &Bar{w: w, label: label, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
				b.mu.Lock()
				b.draw(time.Since(b.start))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// Update records p; it is a Config.Progress.
func (b *Bar) Update(p Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = p
	if time.Since(b.drawn) >= 50*time.Millisecond {
		b.draw(p.Elapsed)
	}
}

// Close draws the final state and ends the line.
func (b *Bar) Close() {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(time.Since(b.start))
	fmt.Fprintln(b.w)
}

func (b *Bar) draw(elapsed time.Duration) {
	p := b.last
	b.drawn = time.Now()
	frac := 0.0
	switch {
	case elapsed < p.Warmups:
		frac = 0
	case p.Requests > 0:
		frac = float64(p.Done) / float64(p.Requests)
	}
	if p.Duration > 0 && elapsed > p.Warmups {
		frac = max(frac, float64(elapsed-p.Warmups)/float64(p.Duration))
	}
	frac = min(max(frac, 0), 1)
	const width = 30
	n := int(frac * width)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	state := fmt.Sprintf("%d done", p.Done)
	if p.Requests > 0 {
		state = fmt.Sprintf("%d/%d", p.Done, p.Requests)
	}
	if elapsed < p.Warmups {
		state = "warming up"
	}
	fmt.Fprintf(b.w, "\r%s [%s] %3.0f%% %s, %d in flight, %d failed, %s   ",
		b.label, bar, frac*100, state, p.InFlight, p.Failed, elapsed.Round(100*time.Millisecond))
}
