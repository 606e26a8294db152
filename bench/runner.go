package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Doer sends one request and measures it; *Client is the real one.
type Doer interface {
	Do(ctx context.Context, r Request) Result
}

var _ Doer = (*Client)(nil)

// Config is how a run sends its requests and when it stops.
type Config struct {
	// Concurrency caps the requests in flight. Without a Rate, the run keeps
	// exactly this many in flight (a closed loop); with a Rate, 0 means no cap.
	Concurrency int
	// Rate is the mean arrival rate in requests per second of a Poisson process;
	// 0 means a closed loop at Concurrency.
	Rate float64
	// Scheduled sends each request at its own time (Request.At, a trace's
	// timestamps) instead of at a rate; Concurrency, if set, still caps the
	// requests in flight. The run ends when the workload has no more requests.
	Scheduled bool
	// TraceSpeedup is the trace speedup of one load of a --trace-speedup sweep,
	// kept in the report so capacity can be read from it (0 outside a sweep).
	TraceSpeedup float64
	// Seed makes the prompts and the arrival times reproducible.
	Seed uint64
	// Requests is how many requests to measure (after the warm-up); Duration is
	// how long to send them for. The run stops at whichever comes first; at least
	// one must be set, so a run always ends by itself.
	Requests int
	Duration time.Duration
	// Warmup is a period at the start whose requests are sent but not counted.
	Warmup time.Duration
	// SLO, when set, is what goodput counts against.
	SLO SLO
	// Progress, when set, is called after each request ends, never concurrently.
	Progress func(Progress)
}

// Progress is the state of a run as it goes.
type Progress struct {
	Elapsed time.Duration
	// Warmup is true while the warm-up period lasts.
	Warmup bool
	// Sent, Done and Failed count measured requests.
	Sent, Done, Failed int
	InFlight           int
	// Requests and Duration are the run's bounds (0 when not set).
	Requests int
	Duration time.Duration
	Warmups  time.Duration
}

// Validate checks that the run is bounded and its numbers make sense.
func (c Config) Validate() error {
	var errs []error
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("bench: concurrency %d must not be negative", c.Concurrency))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("bench: rate %g must not be negative", c.Rate))
	}
	if c.Scheduled && c.Rate > 0 {
		errs = append(errs, errors.New("bench: a trace sets its own arrival times; give no rate with it"))
	}
	if c.Rate == 0 && c.Concurrency == 0 && !c.Scheduled {
		errs = append(errs, errors.New("bench: give a concurrency or a rate"))
	}
	if c.Requests <= 0 && c.Duration <= 0 && !c.Scheduled {
		errs = append(errs, errors.New("bench: give a number of requests or a duration, so the run ends"))
	}
	if c.Requests < 0 || c.Duration < 0 || c.Warmup < 0 {
		errs = append(errs, errors.New("bench: requests, duration and warm-up must not be negative"))
	}
	return errors.Join(errs...)
}

// Run drives wl through d as cfg says and reports what it measured. When ctx ends
// it stops sending, cancels the requests in flight (they count as aborted, not
// failed) and reports what it has, with Interrupted set.
func Run(ctx context.Context, cfg Config, wl Workload, d Doer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	stopReqs := context.AfterFunc(ctx, cancelReqs)
	defer stopReqs()

	start := time.Now()
	warmEnd := start.Add(cfg.Warmup)
	// sendCtx ends when no more requests may be sent: at the end of the window, or
	// when ctx ends.
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	if cfg.Duration > 0 {
		sendCtx, stopSending = context.WithDeadline(sendCtx, warmEnd.Add(cfg.Duration))
		defer stopSending()
	}
	var sem chan struct{}
	if cfg.Concurrency > 0 {
		sem = make(chan struct{}, cfg.Concurrency)
	}
	promptRng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	arrivalRng := rand.New(rand.NewPCG(cfg.Seed, 0xbf58476d1ce4e5b9))

	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		results  []Result
		prog     = Progress{Requests: cfg.Requests, Duration: cfg.Duration, Warmups: cfg.Warmup}
		stopErr  error
		nextSend = start
	)
	if l, ok := wl.(interface{ Len() int }); ok && cfg.Scheduled && cfg.Requests <= 0 {
		// A trace ends with its window: the bar counts towards that.
		prog.Requests = l.Len()
	}
	report := func() {
		if cfg.Progress != nil {
			prog.Elapsed = time.Since(start)
			prog.Warmup = prog.Elapsed < cfg.Warmup
			cfg.Progress(prog)
		}
	}

	for (cfg.Requests <= 0 || prog.Sent < cfg.Requests) && sendCtx.Err() == nil {
		var req Request
		if cfg.Scheduled {
			// The request says when it is due, so it is drawn before the wait.
			var err error
			if req, err = wl.Next(promptRng); errors.Is(err, ErrWorkloadDone) {
				break
			} else if err != nil {
				stopErr = fmt.Errorf("bench: workload %s: %w", wl.Name(), err)
				break
			}
			if !sleepUntil(sendCtx, start.Add(req.At)) {
				break
			}
		}
		if cfg.Rate > 0 {
			if !sleepUntil(sendCtx, nextSend) {
				break
			}
			nextSend = nextSend.Add(poissonGap(arrivalRng, cfg.Rate))
		}
		if sem != nil {
			acquired := false
			select {
			case sem <- struct{}{}:
				acquired = true
			case <-sendCtx.Done():
			}
			if sendCtx.Err() != nil {
				if acquired {
					<-sem
				}
				break
			}
		}
		if !cfg.Scheduled {
			var err error
			if req, err = wl.Next(promptRng); err != nil {
				if !errors.Is(err, ErrWorkloadDone) {
					stopErr = fmt.Errorf("bench: workload %s: %w", wl.Name(), err)
				}
				if sem != nil {
					<-sem
				}
				break
			}
		}
		sent := time.Now()
		if dl, ok := sendCtx.Deadline(); ok && sent.After(dl) || ctx.Err() != nil {
			if sem != nil {
				<-sem
			}
			break
		}
		warm := sent.Before(warmEnd)
		mu.Lock()
		if !warm {
			prog.Sent++
		}
		prog.InFlight++
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := d.Do(reqCtx, req)
			res.Start, res.Warmup = sent.Sub(start), warm
			if res.Err != "" && reqCtx.Err() != nil {
				res.Aborted = true
			}
			wl.Done(req, &res)
			res.text = ""
			if sem != nil {
				<-sem
			}
			mu.Lock()
			defer mu.Unlock()
			results = append(results, res)
			prog.InFlight--
			if !warm && !res.Aborted {
				prog.Done++
				if res.Err != "" {
					prog.Failed++
				}
			}
			report()
		}()
	}
	if stopErr != nil {
		cancelReqs()
	}
	wg.Wait()
	end := time.Now()
	if stopErr != nil {
		return nil, stopErr
	}

	window := end.Sub(warmEnd)
	if window < 0 {
		window = 0
	}
	rep := &Report{
		Workload: wl.Name(), Concurrency: cfg.Concurrency, Rate: cfg.Rate, Scheduled: cfg.Scheduled, TraceSpeedup: cfg.TraceSpeedup, Seed: cfg.Seed,
		WarmupS: cfg.Warmup.Seconds(), Interrupted: ctx.Err() != nil,
		StartedAt: start, Results: results,
	}
	if cfg.SLO.Set() {
		rep.SLO = cfg.SLO.String()
	}
	if n, ok := wl.(ReportNoter); ok {
		n.NoteReport(rep)
	}
	var order []string
	if o, ok := wl.(ClassOrderer); ok {
		order = o.ClassOrder()
	}
	rep.summarize(cfg.SLO, window, order)
	return rep, nil
}

// sleepUntil waits until t, or until ctx ends (then it returns false).
func sleepUntil(ctx context.Context, t time.Time) bool {
	dt := time.Until(t)
	if dt <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(dt)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// poissonGap draws the time to the next arrival of a Poisson process of rate
// per second: exponentially distributed with mean 1/rate.
func poissonGap(rng *rand.Rand, rate float64) time.Duration {
	return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
}
