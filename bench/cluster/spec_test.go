package cluster

import (
	"slices"
	"strings"
	"testing"
)

func TestParseDeployments(t *testing.T) {
	ds, err := Parse("aggregated, always-remote@*, cost@2{--max-prefill-queue-tokens 8192}{router: --isl-gate --isl-adaptive},threshold", 4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.Name)
		if d.Prefill+d.Decode != 4 {
			t.Errorf("%s: %d prefill + %d decode workers, want 4 devices", d.Name, d.Prefill, d.Decode)
		}
	}
	want := []string{"aggregated", "always-remote@1", "always-remote@2", "always-remote@3",
		"cost@2{--max-prefill-queue-tokens 8192}{router: --isl-gate --isl-adaptive}", "threshold"}
	if !slices.Equal(got, want) {
		t.Fatalf("names %q, want %q", got, want)
	}
	if ds[0].Mode != "aggregated" || ds[0].Prefill != 0 {
		t.Errorf("aggregated: %+v", ds[0])
	}
	if ds[2].Prefill != 2 || ds[2].Policy != "always-remote" || ds[2].Mode != "decode" {
		t.Errorf("always-remote@2: %+v", ds[2])
	}
	c := ds[4]
	if c.Prefill != 2 || !slices.Equal(c.ExtraDecodeFlags, []string{"--max-prefill-queue-tokens", "8192"}) ||
		!slices.Equal(c.RouterFlags, []string{"--isl-gate", "--isl-adaptive"}) {
		t.Errorf("cost@2 with flags: %+v", c)
	}
	if ds[5].Prefill != 1 || ds[5].Decode != 3 {
		t.Errorf("threshold: %+v", ds[5])
	}
}

func TestParseHybrid(t *testing.T) {
	ds, err := Parse("threshold@1+2{router: --isl-gate}", 4)
	if err != nil {
		t.Fatal(err)
	}
	if d := ds[0]; d.Prefill != 1 || d.Aggregated != 2 || d.Decode != 1 || d.Mode != "decode" {
		t.Errorf("threshold@1+2: %+v", d)
	}
}

// Role-flexible workers: aggregated workers given --lend-prefill lend prefill,
// with or without prefill workers beside them.
func TestParseLenders(t *testing.T) {
	ds, err := Parse("load@0+2{aggregated: --lend-prefill}, cost@1+1{--x 1}{aggregated: --lend-prefill --y}{router: --isl-gate}, cost@1+1", 4)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	if d.Name != "load@0+2{aggregated: --lend-prefill}" || d.Prefill != 0 || d.Aggregated != 2 || d.Decode != 2 || d.Policy != "load" ||
		!d.Lends() || !slices.Equal(d.AggregatedFlags, []string{"--lend-prefill"}) || len(d.ExtraDecodeFlags) != 0 {
		t.Errorf("load@0+2 lending: %+v", d)
	}
	d = ds[1]
	if d.Prefill != 1 || d.Aggregated != 1 || d.Decode != 2 || !d.Lends() ||
		!slices.Equal(d.AggregatedFlags, []string{"--lend-prefill", "--y"}) || !slices.Equal(d.ExtraDecodeFlags, []string{"--x", "1"}) ||
		!slices.Equal(d.RouterFlags, []string{"--isl-gate"}) {
		t.Errorf("cost@1+1 lending: %+v", d)
	}
	if ds[2].Lends() {
		t.Errorf("cost@1+1 without the flag lends: %+v", ds[2])
	}
}

// {frontend: ...} flags go to the frontend, in either kind of deployment.
func TestParseFrontendFlags(t *testing.T) {
	ds, err := Parse("aggregated{--a}{frontend: --refused-hold 10s}, slo@2{frontend: --max-queue 8}{--b}{frontend: --x}", 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds[0].FrontendFlags, []string{"--refused-hold", "10s"}) || !slices.Equal(ds[0].ExtraDecodeFlags, []string{"--a"}) {
		t.Errorf("aggregated: %+v", ds[0])
	}
	if !slices.Equal(ds[1].FrontendFlags, []string{"--max-queue", "8", "--x"}) || !slices.Equal(ds[1].ExtraDecodeFlags, []string{"--b"}) ||
		ds[1].Prefill != 2 {
		t.Errorf("slo@2: %+v", ds[1])
	}
}

func TestParseRejects(t *testing.T) {
	for spec, want := range map[string]string{
		"sometimes":                              "unknown deployment",
		"cost@4":                                 "from 1 to 3",
		"cost@0":                                 "P = 0 needs aggregated workers that lend prefill",
		"cost@0+2":                               "P = 0 needs aggregated workers that lend prefill",
		"cost@0+2{aggregated: --x}":              "P = 0 needs aggregated workers that lend prefill",
		"cost@1{aggregated: --lend-prefill}":     "needs aggregated workers",
		"aggregated{aggregated: --lend-prefill}": "takes {--flags}",
		"cost@-1+1":                              "from 1 to 2",
		"aggregated@1":                           "no prefill workers",
		"cost{--x":                               "not closed",
		"cost,cost":                              "listed twice",
		"cost{--x} junk":                         "unexpected",
		"always-remote@x":                        "from 1 to 3",
		" , ":                                    "no deployment",
		"always-remote@*,always-remote@2":        "listed twice",
	} {
		if _, err := Parse(spec, 4); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error saying %q", spec, err, want)
		}
	}
}

func TestLogNameIsAFileName(t *testing.T) {
	if got := LogName("cost@2{--x 1}{router: --y}"); got != "cost@2_--x_1__router__--y_" {
		t.Errorf("LogName = %q", got)
	}
}
