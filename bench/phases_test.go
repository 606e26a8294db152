package bench

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParsePhases(t *testing.T) {
	ph, err := ParsePhases("60s:0.95:64/64@900, 2m:0.2:64/64+0.8:4096/128@40")
	if err != nil {
		t.Fatal(err)
	}
	if len(ph) != 2 || ph[0].Duration != time.Minute || ph[0].Rate != 900 || len(ph[0].Classes) != 1 ||
		ph[1].Duration != 2*time.Minute || ph[1].Rate != 40 || len(ph[1].Classes) != 2 ||
		ph[1].Classes[1] != (Class{Name: "4096/128", Weight: 0.8, ISL: 4096, OSL: 128}) {
		t.Errorf("ParsePhases = %+v", ph)
	}
	for bad, want := range map[string]string{
		"":                          "phase 1 is empty",
		"60s:1:64/64@9,":            "phase 2 is empty",
		"60:1:64/64@9":              "duration",
		"-1s:1:64/64@9":             "duration",
		"60s:1:64/64":               "DURATION:MIX@RATE",
		"60s:1:64/64@0":             "rate",
		"60s:1:64/64@NaN":           "rate",
		"60s:1:64/64@1e9":           "rate",
		"60s:0:64/64@9":             "weight",
		"60s:1:64@9":                "weight:ISL/OSL",
		"60s:1:0/64@9":              "ISL",
		"60s:1:64/x@9":              "OSL",
		"60s:1:64/64+2:64/64@9":     "twice",
		"60s:1:64/64++1:8/8@9":      "weight:ISL/OSL",
		"60s:1e308:1/1+1e308:2/2@1": "overflow",
	} {
		_, err := ParsePhases(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePhases(%q) = %v, want an error saying %q", bad, err, want)
		}
	}
}

// FuzzParsePhases: no spec panics, and an accepted one is within bounds.
func FuzzParsePhases(f *testing.F) {
	for _, s := range []string{"60s:0.95:64/64@900,60s:0.2:64/64+0.8:4096/128@40", "1s:1:1/1@1", "", "1s:1:1/1@", ",,", "1h:1:1/1+1:2/2@1e5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ph, err := ParsePhases(s)
		if err != nil {
			return
		}
		for _, p := range ph {
			if p.Duration <= 0 || !(p.Rate > 0) || len(p.Classes) == 0 {
				t.Fatalf("ParsePhases(%q) accepted %+v", s, p)
			}
			for _, c := range p.Classes {
				if !(c.Weight > 0) || c.ISL < 1 || c.OSL < 1 {
					t.Fatalf("ParsePhases(%q) accepted class %+v", s, c)
				}
			}
		}
	})
}

// The phases follow each other at their own rates and mixes, and the
// workload ends with the last.
func TestPhasesShiftRateAndMix(t *testing.T) {
	ph, err := ParsePhases("10s:1:16/8@50,10s:0.5:16/8+0.5:64/8@5")
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewPhases(testPrompts(t), ph, 2)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	count := map[string]int{}
	var last time.Duration
	for {
		r, err := w.Next(rng)
		if errors.Is(err, ErrWorkloadDone) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if r.At < last || r.At >= 20*time.Second {
			t.Fatalf("request at %v after one at %v (phases end at 20s)", r.At, last)
		}
		last = r.At
		if p1 := r.At < 10*time.Second; p1 != strings.HasPrefix(r.Class, "p1 ") {
			t.Errorf("request at %v is of class %q", r.At, r.Class)
		}
		count[r.Class]++
	}
	// 10s at 100/s, then 10s at 10/s split in two classes (scale 2).
	if n := count["p1 16/8"]; n < 850 || n > 1150 {
		t.Errorf("phase 1 sent %d requests, want about 1000", n)
	}
	if a, b := count["p2 16/8"], count["p2 64/8"]; a+b < 70 || a+b > 130 || a < 25 || b < 25 {
		t.Errorf("phase 2 sent %d and %d requests, want about 50 each", a, b)
	}
	if got := w.ClassOrder(); strings.Join(got, ",") != "p1 16/8,p2 16/8,p2 64/8" {
		t.Errorf("ClassOrder = %q", got)
	}
}

func TestPhasesPlanSweepsScales(t *testing.T) {
	o := Options{Phases: "1s:1:16/8@5", PhasesScales: "0.5,1", Workload: "fixed", Endpoint: EndpointCompletions, URL: "http://127.0.0.1:1", Timeout: time.Second}
	p, err := o.Plan(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Configs) != 2 || !p.Configs[0].Scheduled || p.Configs[1].TraceSpeedup != 1 || p.Labels[0] != "scale=0.5" {
		t.Errorf("plan = %+v %v", p.Configs, p.Labels)
	}
	o.Rates = "3"
	if _, err := o.Plan(false); err == nil || !strings.Contains(err.Error(), "--phases-scale") {
		t.Errorf("--phases with --rate: %v", err)
	}
}
