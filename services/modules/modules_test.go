package modules

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fake is a service that records when it runs and stops, and can fail.
type fake struct {
	name string
	log  *events
	fail error // returned by Run at once
}

type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

func (f *fake) Addr() string { return f.name }

func (f *fake) Run(ctx context.Context) error {
	if f.fail != nil {
		f.log.add("failed " + f.name)
		return f.fail
	}
	<-ctx.Done()
	f.log.add("stopped " + f.name)
	return nil
}

func module(log *events, name string, deps []string, svcs ...*fake) Module {
	return Module{Name: name, Deps: deps, Start: func(context.Context) ([]Service, error) {
		log.add("started " + name)
		var out []Service
		for _, s := range svcs {
			out = append(out, s)
		}
		return out, nil
	}}
}

// registry is tandem's shape: workers, a router over them, a frontend over it.
func registry(log *events, fail error) *Registry {
	var r Registry
	r.Register(module(log, "frontend", []string{"router"}, &fake{name: "f", log: log}))
	r.Register(module(log, "router", []string{"decode", "prefill"}, &fake{name: "r", log: log, fail: fail}))
	r.Register(module(log, "decode", []string{"prefill"}, &fake{name: "d0", log: log}, &fake{name: "d1", log: log}))
	r.Register(module(log, "prefill", nil, &fake{name: "p0", log: log}))
	return &r
}

// TestRunStartsInOrderAndStopsInReverse: every module starts after what it
// depends on and serves before the next one starts; on shutdown the modules stop
// in reverse, each waited for, so the frontend stops before the router it calls.
func TestRunStartsInOrderAndStopsInReverse(t *testing.T) {
	log := &events{}
	r := registry(log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var ready []string
	err := r.Run(ctx, r.Names(), func(_ context.Context, s Service) error {
		ready = append(ready, s.Addr())
		return nil
	}, cancel)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := strings.Join(log.get(), ", ")
	started := "started prefill, started decode, started router, started frontend"
	if !strings.HasPrefix(got, started) {
		t.Errorf("events %s; want them to begin %s", got, started)
	}
	at := func(e string) int { return slices.Index(log.get(), e) }
	if f, r, d0, d1, p0 := at("stopped f"), at("stopped r"), at("stopped d0"), at("stopped d1"), at("stopped p0"); f < 0 || !(f < r && r < min(d0,
		d1) && max(d0, d1) < p0) {
		t.Errorf("events %s; want the frontend stopped, then the router, then the decode workers, then the prefill worker", got)
	}
	if !slices.Equal(ready, []string{"p0", "d0", "d1", "r", "f"}) {
		t.Errorf("waited on %v, want each service in start order", ready)
	}
}

// TestRunOneRole: a role run alone starts only its module; the modules it depends
// on run elsewhere.
func TestRunOneRole(t *testing.T) {
	log := &events{}
	r := registry(log, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Run(ctx, []string{"router"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := log.get(); !slices.Equal(got, []string{"started router", "stopped r"}) {
		t.Errorf("events %v, want the router alone", got)
	}
}

// TestRunStopsAllWhenOneFails: a service that fails takes the others down, and
// its error is what Run returns.
func TestRunStopsAllWhenOneFails(t *testing.T) {
	log := &events{}
	boom := errors.New("router: listener gone")
	r := registry(log, boom)
	err := r.Run(context.Background(), r.Names(), func(ctx context.Context, s Service) error {
		if s.Addr() == "r" {
			<-ctx.Done() // the router never serves: it failed
			return ctx.Err()
		}
		return nil
	}, func() { t.Error("started called although the router failed") })
	if !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want the router's failure", err)
	}
	for _, s := range []string{"stopped d0", "stopped d1", "stopped p0"} {
		if !slices.Contains(log.get(), s) {
			t.Errorf("events %v lack %q", log.get(), s)
		}
	}
	if slices.Contains(log.get(), "started frontend") {
		t.Error("the frontend started after the router failed")
	}
}

// TestRunStopsWhatAFailedStartStarted: a module that fails halfway (its second
// worker cannot start) has the services it did start stopped with the rest.
func TestRunStopsWhatAFailedStartStarted(t *testing.T) {
	log := &events{}
	var r Registry
	r.Register(module(log, "prefill", nil, &fake{name: "p0", log: log}))
	r.Register(Module{Name: "decode", Deps: []string{"prefill"}, Start: func(context.Context) ([]Service, error) {
		return []Service{&fake{name: "d0", log: log}}, errors.New("decode-1: no port")
	}})
	err := r.Run(context.Background(), r.Names(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "decode-1: no port") {
		t.Fatalf("Run returned %v, want decode-1's error", err)
	}
	if got := log.get(); !slices.Contains(got, "stopped d0") || !slices.Contains(got, "stopped p0") {
		t.Errorf("events %v; want d0 and p0 stopped", got)
	}
}

func TestOrderErrors(t *testing.T) {
	var r Registry
	r.Register(Module{Name: "a", Deps: []string{"b"}})
	r.Register(Module{Name: "b", Deps: []string{"a"}})
	r.Register(Module{Name: "c", Deps: []string{"nowhere"}})
	for _, tc := range []struct {
		targets []string
		want    string
	}{
		{[]string{"a", "b"}, "cycle"},
		{[]string{"c"}, `unknown module "nowhere"`},
		{[]string{"zzz"}, `unknown module "zzz"`},
	} {
		if _, err := r.Order(tc.targets); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Order(%v) = %v, want an error saying %q", tc.targets, err, tc.want)
		}
	}
}
