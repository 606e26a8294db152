package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A mixed workload against a server whose classes succeed by different prefill
// paths and one of which fails: the JSON, the charts and the table say what the
// server did.
func TestBenchMixedJSONPlotsSLO(t *testing.T) {
	fake, url := startFake(t)
	dir := t.TempDir()
	jsonPath, plots := filepath.Join(dir, "out.json"), filepath.Join(dir, "charts")
	stdout, stderr, err := runTandem(t, "bench", "--url", url, "--endpoint", "chat",
		"--workload", "mixed", "--mix", "local=1:8/3,remote=1:12/4,fallback=1:16/5,broken=1:8/6",
		"--requests", "24", "--concurrency", "4", "--seed", "7",
		"--slo", "ttft=600000,tpot=600000", "--json", jsonPath, "--plots", plots)
	if err != nil {
		t.Fatalf("bench failed: %v\nstderr:\n%s", err, stderr)
	}
	requests, noUsage, models, paths, byMax, endpoint := fake.snapshot()
	if requests != 24 || endpoint["/v1/chat/completions"] != 24 {
		t.Errorf("the server saw %d requests (%v); want 24 to /v1/chat/completions", requests, endpoint)
	}
	if models["fake-model"] != 24 {
		t.Errorf("models asked for: %v; want the first one /v1/models lists, fake-model, on all 24", models)
	}
	if noUsage != 0 {
		t.Errorf("%d streamed requests did not ask for usage", noUsage)
	}

	out := readBenchJSON(t, jsonPath)
	if len(out.Runs) != 1 {
		t.Fatalf("%d runs in the JSON, want 1", len(out.Runs))
	}
	if got := strings.Join(out.Command, " "); !strings.HasPrefix(got, "tandem bench --url ") || !strings.Contains(got, "--workload mixed") {
		t.Errorf("command in the JSON is %q", got)
	}
	rn := out.Runs[0]
	if !strings.HasPrefix(rn.Workload, "mixed ") || rn.Concurrency != 4 || rn.SLO != "ttft=600000,tpot=600000" || rn.Label != "concurrency=4" {
		t.Errorf("run: workload %q, concurrency %d, slo %q, label %q", rn.Workload, rn.Concurrency, rn.SLO, rn.Label)
	}
	all := rn.Overall
	if all.Class != "all" || all.Requests != 24 || all.Completed+all.Failed != 24 || all.Aborted != 0 {
		t.Errorf("overall: %+v; want 24 requests, each completed or failed", all)
	}
	// Prefill paths: exactly what the server sent, by header or in the stream.
	delete(paths, "")
	for k, v := range paths {
		if all.PrefillPaths[k] != v {
			t.Errorf("prefill_paths %v; the server sent %v", all.PrefillPaths, paths)
			break
		}
	}
	if len(all.PrefillPaths) != len(paths) {
		t.Errorf("prefill_paths %v; the server sent %v", all.PrefillPaths, paths)
	}
	// Per class, in the mix's order, each with what the server did for its max_tokens.
	want := []struct {
		name, path string
		max        int
	}{{"local", "local", 3}, {"remote", "remote", 4}, {"fallback", "fallback", 5}, {"broken", "", 6}}
	if len(rn.Classes) != len(want) {
		t.Fatalf("classes %+v; want %d", rn.Classes, len(want))
	}
	sum := 0
	for i, w := range want {
		c := rn.Classes[i]
		sum += c.Requests
		if c.Class != w.name {
			t.Errorf("classes[%d] is %q, want %q", i, c.Class, w.name)
			continue
		}
		if c.Requests == 0 {
			t.Errorf("class %s sent no request in 24 (seed 7): the mix is not drawn from", w.name)
		}
		if w.max == 6 {
			if c.Completed != 0 || c.Failed != c.Requests || c.Errors["HTTP 503: overloaded"] != c.Requests {
				t.Errorf("class broken: %+v; want every request failed with HTTP 503: overloaded", c)
			}
			if c.GoodRequests == nil || *c.GoodRequests != 0 || c.Goodput == nil || *c.Goodput != 0 {
				t.Errorf("class broken: goodput %v (%v requests); a failed request is never good", c.Goodput, c.GoodRequests)
			}
			continue
		}
		if c.Completed != byMax[w.max] || c.Failed != 0 || c.Completed != c.Requests {
			t.Errorf("class %s: %d completed, %d failed of %d; the server completed %d", w.name, c.Completed, c.Failed, c.Requests, byMax[w.max])
		}
		if len(c.PrefillPaths) != 1 || c.PrefillPaths[w.path] != c.Completed {
			t.Errorf("class %s: prefill_paths %v, want %s=%d", w.name, c.PrefillPaths, w.path, c.Completed)
		}
		// Token counts come from the usage chunk, not from counting chunks.
		if c.OutputTokens != c.Completed*w.max || c.InputTokens != c.Completed*(100+w.max) {
			t.Errorf("class %s: %d in, %d out tokens; the server reported %d and %d per request", w.name, c.InputTokens, c.OutputTokens, 100+w.max, w.max)
		}
		if c.TTFT.N != c.Completed || c.ITL.N != c.Completed*(w.max-1) {
			t.Errorf("class %s: %d TTFTs and %d ITLs for %d requests of %d chunks", w.name, c.TTFT.N, c.ITL.N, c.Completed, w.max)
		}
		// The SLO is generous: every completed request is good.
		if c.GoodRequests == nil || *c.GoodRequests != c.Completed || c.Goodput == nil || c.DurationS <= 0 ||
			!approx(*c.Goodput, float64(c.Completed)/c.DurationS) {
			t.Errorf("class %s: good %v, goodput %v over %gs; want all %d completed good", w.name, c.GoodRequests, c.Goodput, c.DurationS, c.Completed)
		}
	}
	if sum != 24 {
		t.Errorf("the classes add up to %d requests, not 24", sum)
	}
	if all.GoodRequests == nil || *all.GoodRequests != all.Completed {
		t.Errorf("overall good requests %v, completed %d", all.GoodRequests, all.Completed)
	}
	var recs []map[string]any
	if err := json.Unmarshal(rn.Requests, &recs); err != nil || len(recs) != 24 {
		t.Errorf("per-request records: %d (%v), want 24", len(recs), err)
	}

	checkPNGs(t, plots, "ttft_cdf.png", "itl_cdf.png")
	for _, s := range []string{"== concurrency=4: mixed", "good/s (ttft=600000,tpot=600000)", "local", "remote", "fallback", "broken",
		"HTTP 503: overloaded", "TTFT", "ITL"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("the report does not mention %q:\n%s", s, stdout)
		}
	}
	if !strings.Contains(stderr, "bench: wrote "+jsonPath) || !strings.Contains(stderr, "bench: wrote "+filepath.Join(plots, "ttft_cdf.png")) {
		t.Errorf("stderr does not say what was written:\n%s", stderr)
	}
	checkNoProgressBar(t, stderr)
}

func approx(a, b float64) bool { return a-b < 1e-9*max(1, b) && b-a < 1e-9*max(1, b) }

// An SLO that a class cannot meet by construction (the server waits 60ms before
// its first chunk; the objective is 5ms) counts none of it as good.
func TestBenchGoodputMissedSLO(t *testing.T) {
	_, url := startFake(t)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	stdout, stderr, err := runTandem(t, "bench", "--url", url, "--model", "m", "--workload", "fixed", "--isl", "8", "--osl", "7",
		"--requests", "3", "--concurrency", "3", "--slo", "ttft:5", "--json", jsonPath, "--per-request=false")
	if err != nil {
		t.Fatalf("bench failed: %v\n%s", err, stderr)
	}
	rn := readBenchJSON(t, jsonPath).Runs[0]
	all := rn.Overall
	if rn.SLO != "ttft=5" || all.Completed != 3 || all.GoodRequests == nil || *all.GoodRequests != 0 || all.Goodput == nil || *all.Goodput != 0 {
		t.Errorf("slo %q, %d completed, good %v, goodput %v; want 3 completed, none good", rn.SLO, all.Completed, all.GoodRequests, all.Goodput)
	}
	if len(rn.Requests) != 0 {
		t.Errorf("--per-request=false, yet the JSON has requests: %s", rn.Requests)
	}
	if !strings.Contains(stdout, "0.000 (0)") {
		t.Errorf("the report does not show zero goodput:\n%s", stdout)
	}
}

// Each --workload sends what it says, and the report names it and its classes.
func TestBenchWorkloads(t *testing.T) {
	jsonl := filepath.Join(t.TempDir(), "w.jsonl")
	if err := os.WriteFile(jsonl, []byte(`{"prompt":"hello there","max_tokens":3,"class":"greet"}`+"\n"+
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		requests int
		workload string
		classes  []string
	}{
		{"fixed", []string{"--workload", "fixed", "--isl", "8", "--osl", "3", "--requests", "4"}, 4, "fixed 8/3", []string{"8/3"}},
		{"default is fixed", []string{"--isl", "8", "--osl", "4", "--requests", "2"}, 2, "fixed 8/4", []string{"8/4"}},
		{"shared-prefix", []string{"--workload", "shared-prefix", "--prefix-len", "16", "--isl", "4", "--osl", "3", "--turns", "2", "--conversations",
			"2", "--requests", "4", "--concurrency", "2"},
			4, "shared-prefix prefix=16", []string{"turn-1", "turn-2"}},
		{"jsonl", []string{"--workload", "jsonl", "--file", jsonl, "--requests", "2", "--concurrency", "1"}, 2, "jsonl (2 requests)",
			[]string{"greet", "jsonl"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, url := startFake(t)
			jsonPath := filepath.Join(t.TempDir(), "out.json")
			stdout, stderr, err := runTandem(t, append([]string{"bench", "--url", url, "--json", jsonPath}, tc.args...)...)
			if err != nil {
				t.Fatalf("bench failed: %v\n%s", err, stderr)
			}
			n, _, _, _, _, endpoint := fake.snapshot()
			if n != tc.requests || endpoint["/v1/completions"] != tc.requests {
				t.Errorf("the server saw %d requests (%v), want %d to /v1/completions", n, endpoint, tc.requests)
			}
			rn := readBenchJSON(t, jsonPath).Runs[0]
			if !strings.HasPrefix(rn.Workload, tc.workload) || rn.Overall.Requests != tc.requests || rn.Overall.Completed != tc.requests {
				t.Errorf("workload %q with %d requests, %d completed; want %q, %d", rn.Workload, rn.Overall.Requests, rn.Overall.Completed,
					tc.workload, tc.requests)
			}
			var got []string
			for _, c := range rn.Classes {
				got = append(got, c.Class)
			}
			if strings.Join(got, ",") != strings.Join(tc.classes, ",") {
				t.Errorf("classes %v, want %v", got, tc.classes)
			}
			for _, c := range tc.classes {
				if !strings.Contains(stdout, c) {
					t.Errorf("the report does not mention class %s:\n%s", c, stdout)
				}
			}
			checkNoProgressBar(t, stderr)
		})
	}
}

// A rate sweep runs once per rate and prints the sweep table; the JSON has a run
// per rate.
func TestBenchRateSweep(t *testing.T) {
	fake, url := startFake(t)
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	stdout, stderr, err := runTandem(t, "bench", "--url", url, "--isl", "8", "--osl", "3", "--rate", "200,400", "--requests", "3",
		"--json", jsonPath, "--plots", dir)
	if err != nil {
		t.Fatalf("bench failed: %v\n%s", err, stderr)
	}
	if n, _, _, _, _, _ := fake.snapshot(); n != 6 {
		t.Errorf("the server saw %d requests, want 3 per rate", n)
	}
	out := readBenchJSON(t, jsonPath)
	if len(out.Runs) != 2 || out.Runs[0].Label != "rate=200" || out.Runs[1].Label != "rate=400" || out.Runs[1].Rate != 400 {
		t.Fatalf("runs %+v, want rate=200 then rate=400", out.Runs)
	}
	// Each rate its own prompts, so that a later rate does not resend what the
	// server cached during the earlier one.
	if out.Runs[0].Seed != 1 || out.Runs[1].Seed != 2 {
		t.Errorf("seeds %d and %d, want 1 and 2 (--seed 1, one more a rate)", out.Runs[0].Seed, out.Runs[1].Seed)
	}
	if !strings.Contains(stdout, "== sweep") || !strings.Contains(stdout, "rate=400") {
		t.Errorf("no sweep table:\n%s", stdout)
	}
	checkPNGs(t, dir, "ttft_cdf.png")
}

// testTrace is the window of Mooncake's conversation trace bench's tests use.
const testTrace = "../../bench/testdata/mooncake-conversation-300.jsonl"

// Bad flags are refused with an error that names the problem, before any request
// is sent.
func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "nope"}, `unknown --workload "nope"`},
		{[]string{"--slo", "ttft"}, `SLO "ttft": want key=milliseconds`},
		{[]string{"--slo", "ttft=-5"}, "positive number of milliseconds"},
		{[]string{"--slo", "latency=5"}, `unknown objective "latency"`},
		{[]string{"--rate", "0"}, "each rate must be a positive number"},
		{[]string{"--rate", "2", "--concurrency", "0"}, "--concurrency must be positive"},
		{[]string{"--workload", "jsonl"}, "--workload jsonl needs --file"},
		{[]string{"--workload", "mixed", "--mix", "0.5:64"}, "want weight:ISL/OSL"},
		{[]string{"--endpoint", "embeddings"}, `endpoint "embeddings"`},
		{[]string{"--requests", "-1"}, "must not be negative"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"--workload", "trace"}, "--workload trace needs --trace FILE"},
		{[]string{"--trace", "no-such.jsonl"}, "no-such.jsonl: no such file"},
		{[]string{"--trace", testTrace, "--rate", "2"}, "use --trace-speedup instead of --rate"},
		{[]string{"--trace", testTrace, "--endpoint", "chat"}, "only --endpoint completions takes"},
		{[]string{"--trace", testTrace, "--workload", "jsonl"}, "cannot be combined with --workload jsonl"},
		{[]string{"--trace", testTrace, "--trace-token-scale", "0"}, "--trace-token-scale 0 must be in (0, 1]"},
		{[]string{"--trace", testTrace, "--trace-speedup", "-1"}, "--trace-speedup -1 must be"},
		{[]string{"--trace", testTrace, "--trace-start", "300"}, "--trace-start 300 is past the trace's 300 requests"},
		{[]string{"--trace", testTrace, "--trace-block-size", "256"}, "trace line 1: field hash_ids: 14 ids, but input_length 6758 needs 27 blocks"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fake, url := startFake(t)
			_, stderr, err := runTandem(t, append([]string{"bench", "--url", url}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q\nstderr:\n%s", err, tc.want, stderr)
			}
			if n, _, _, _, _, _ := fake.snapshot(); n != 0 {
				t.Errorf("%d requests sent despite the bad flag", n)
			}
		})
	}
	// A bad URL is refused the same way.
	if _, _, err := runTandem(t, "bench", "--url", "localhost:1"); err == nil || !strings.Contains(err.Error(), "must start with http://") {
		t.Errorf("--url without a scheme: %v", err)
	}
}

// What a user running the binary sees: status 1 and the error on stderr for a bad
// flag, status 0 for a good run.
func TestBenchExitStatus(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, url := startFake(t)
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"bench", "--url", url, "--workload", "nope"}, 1, `tandem: bench: unknown --workload "nope"`},
		{[]string{"bench", "--url", url, "--slo", "ttft=abc"}, 1, `tandem: bench: SLO "ttft=abc"`},
		{[]string{"bench", "--url", url, "--model", "m", "--isl", "8", "--osl", "3", "--requests", "2"}, 0, ""},
	} {
		cmd := exec.Command(exe, tc.args...)
		cmd.Env = append(os.Environ(), benchTestMain+"=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		status := 0
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != tc.status || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("tandem %s: status %d, stderr %q; want %d and %q", strings.Join(tc.args[2:], " "), status, stderr.String(), tc.status, tc.stderr)
		}
		if tc.status == 0 && !strings.Contains(stdout.String(), "== concurrency=4: fixed 8/3") {
			t.Errorf("a good run printed no report:\n%s", stdout.String())
		}
	}
}

// On a terminal stderr the bar is drawn; elsewhere (every other test) it is not.
func TestBenchProgressBarOnTerminal(t *testing.T) {
	master, slave, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer master.Close()
	var seen bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(&seen, master) // ends with EIO once the slave is closed
	}()
	_, url := startFake(t)
	var stdout bytes.Buffer
	err = run(context.Background(), []string{"bench", "--url", url, "--model", "m", "--isl", "8", "--osl", "3", "--requests", "4", "--concurrency", "2"},
		func(string) string { return "" }, &stdout, slave)
	slave.Close()
	<-copied
	if err != nil {
		t.Fatal(err)
	}
	if s := seen.String(); !strings.Contains(s, "\rconcurrency=2 [") || !strings.Contains(s, "4/4") || !strings.Contains(s, "in flight") {
		t.Errorf("no progress bar on the terminal:\n%q", s)
	}
	if strings.Contains(stdout.String(), "\r") {
		t.Errorf("the bar leaked into stdout")
	}
}

// openPTY opens a pseudo-terminal pair with the Linux ptmx interface.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// bench compare starts its deployments as processes of the binary it is given.
// Here that is this test binary playing each service (see TestMain), with the
// frontend serving fakeOpenAI: what is tested is compare's own work (running the
// workload on each deployment in turn, compare.md, results.json, the charts), not
// the workers, which the integration suite and bench/cluster's tests cover.
func TestBenchCompare(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(benchTestFakeTandem, "1")
	out := t.TempDir()
	stdout, stderr, err := runTandem(t, "bench", "compare", "--binary", exe, "--pin=false", "--out", out,
		"--deployments", "aggregated,threshold", "--workers", "2",
		"--mix", "local=1:8/3,remote=1:8/4", "--requests", "6", "--concurrency", "2", "--url", "http://ignored:1")
	if err != nil {
		t.Fatalf("compare failed: %v\nstderr:\n%s", err, stderr)
	}
	md, err := os.ReadFile(filepath.Join(out, "compare.md"))
	if err != nil {
		t.Fatalf("compare.md: %v", err)
	}
	m := string(md)
	if !strings.HasPrefix(m, "```\ntandem bench compare --binary ") || !strings.Contains(m, "| run | class |") {
		t.Errorf("compare.md does not start with the command and a table:\n%s", m)
	}
	for _, row := range []string{"| aggregated | all | 6 | 0 |", "| threshold | all | 6 | 0 |", "| aggregated | local |", "| threshold | remote |"} {
		if !strings.Contains(m, row) {
			t.Errorf("compare.md has no row %q:\n%s", row, m)
		}
	}
	res := readBenchJSON(t, filepath.Join(out, "results.json"))
	if len(res.Runs) != 2 || res.Runs[0].Group != "aggregated" || res.Runs[1].Group != "threshold" {
		t.Fatalf("results.json runs: %+v; want aggregated then threshold", res.Runs)
	}
	for _, r := range res.Runs {
		if r.Overall.Completed != 6 || !strings.HasPrefix(r.Workload, "mixed ") || r.Overall.PrefillPaths["local"]+r.Overall.PrefillPaths["remote"] != 6 {
			t.Errorf("run %s: %+v", r.Label, r.Overall)
		}
	}
	if res.Command[2] != "compare" {
		t.Errorf("results.json command %v", res.Command)
	}
	checkPNGs(t, out, "ttft_cdf.png", "itl_cdf.png")
	if !strings.Contains(stdout, "== comparison") || !strings.Contains(stdout, "== aggregated: mixed") {
		t.Errorf("stdout:\n%s", stdout)
	}
	for _, s := range []string{"compare: --url is ignored", "compare: not pinning", "compare: starting aggregated (0 prefill, 2 decode",
		"compare: starting threshold (1 prefill, 1 decode", "compare: wrote " + filepath.Join(out, "compare.md")} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, stderr)
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(out, "logs", "threshold-*.log")); len(logs) != 4 {
		t.Errorf("logs of the threshold deployment: %v; want prefill, decode, router and frontend", logs)
	}
	checkNoProgressBar(t, stderr)
}

func TestBenchCompareBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "1"}, "--workers must be at least 2"},
		{[]string{"--deployments", "aggregated,bogus"}, `unknown deployment "bogus"`},
		{[]string{"--workload", "nope"}, `unknown --workload "nope"`},
		{[]string{"--slo", "tpot"}, `SLO "tpot"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			_, _, err := runTandem(t, append([]string{"bench", "compare", "--binary", "/nonexistent/tandem", "--out", out}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("--out %s was created although the flags were refused", out)
			}
		})
	}
}

// Each load of a sweep runs on a fresh start of each deployment, so a later
// load finds nothing the earlier one cached. The fake frontend reports every
// prompt token cached once its process has served 3 requests (class warm, see
// fakeOpenAI): on one shared start the second load would read 100 % hits.
func TestBenchCompareSweepStartsEachLoadAfresh(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(benchTestFakeTandem, "1")
	for _, shared := range []bool{false, true} {
		out := t.TempDir()
		args := []string{"bench", "compare", "--binary", exe, "--pin=false", "--out", out, "--deployments", "aggregated", "--workers", "2",
			"--mix", "warm=1:8/8", "--rate", "200,400", "--requests", "3", "--concurrency", "1", fmt.Sprintf("--shared-start=%v", shared),
			"--slo", "ttft=60000"}
		stdout, stderr, err := runTandem(t, args...)
		if err != nil {
			t.Fatalf("compare failed: %v\nstderr:\n%s", err, stderr)
		}
		res := readBenchJSON(t, filepath.Join(out, "results.json"))
		if len(res.Runs) != 2 || res.Runs[0].Label != "aggregated rate=200" || res.Runs[1].Label != "aggregated rate=400" {
			t.Fatalf("shared %v: runs %+v", shared, res.Runs)
		}
		hits := []float64{res.Runs[0].Overall.CacheHitRate, res.Runs[1].Overall.CacheHitRate}
		starts := strings.Count(stderr, "compare: starting aggregated")
		if shared {
			if starts != 1 || hits[1] != 1 {
				t.Errorf("--shared-start: %d starts, hit rates %v; want 1 start and the second load all hits", starts, hits)
			}
			continue
		}
		if hits[0] != 0 || hits[1] != 0 {
			t.Errorf("fresh starts: hit rates %v; the second load inherited the first's cache", hits)
		}
		for _, s := range []string{"compare: starting aggregated (0 prefill, 2 decode, mode aggregated) for rate=200, a fresh start",
			"compare: starting aggregated (0 prefill, 2 decode, mode aggregated) for rate=400, a fresh start"} {
			if !strings.Contains(stderr, s) {
				t.Errorf("stderr does not say %q:\n%s", s, stderr)
			}
		}
		// Both starts sized the prompts the same way: said once, not per start.
		if n := strings.Count(stderr, "bench: prompts sized in cl100k tokens, not the served model's"); n != 1 {
			t.Errorf("the prompt sizing said %d times over 2 fresh starts, want once:\n%s", n, stderr)
		}
		for _, dir := range []string{"rate_200", "rate_400"} {
			if logs, _ := filepath.Glob(filepath.Join(out, "logs", dir, "aggregated-*.log")); len(logs) != 4 {
				t.Errorf("logs of the %s start: %v; want two workers, router and frontend", dir, logs)
			}
		}
		// Every request met the SLO at both loads: the capacity is above the
		// highest, in the table, compare.md and results.json alike.
		if !strings.Contains(stdout, "== capacity") || !strings.Contains(stdout, "> 400 (max probed)") {
			t.Errorf("stdout has no capacity table:\n%s", stdout)
		}
		md, _ := os.ReadFile(filepath.Join(out, "compare.md"))
		if !strings.Contains(string(md), "| aggregated | > 400 (max probed) | 1 (best baseline) | 100.0% | 100.0% |") {
			t.Errorf("compare.md:\n%s", md)
		}
		b, _ := os.ReadFile(filepath.Join(out, "results.json"))
		var f struct {
			Capacity struct {
				Unit string
				Rows []struct {
					Deployment string
					Capacity   float64
					Bound      string
				} `json:"deployments"`
			}
		}
		if err := json.Unmarshal(b, &f); err != nil || f.Capacity.Unit != "req/s" || len(f.Capacity.Rows) != 1 ||
			f.Capacity.Rows[0].Capacity != 400 || f.Capacity.Rows[0].Bound != ">" {
			t.Errorf("results.json capacity: %+v (%v)", f.Capacity, err)
		}
	}
}
