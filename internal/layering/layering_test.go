// Package layering checks the import graph against the layering DEVELOPERS.md
// describes ("Where code goes"), with the go command's own view of it.
package layering

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tandem-serve/tandem"

// pkg is one package of the module as `go list` sees it, without its tests.
type pkg struct {
	path    string   // relative to the module: "decode", "engine/native"
	imports []string // direct imports
	deps    []string // every package it links, direct or not
}

// list runs `go list` over the whole module.
func list(t *testing.T) map[string]pkg {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	format := `{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}|{{.Dir}}|{{join .GoFiles " "}}`
	out, err := exec.Command("go", "list", "-f", format, module+"/...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	pkgs := map[string]pkg{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 5 {
			t.Fatalf("go list line %q", sc.Text())
		}
		// The go command caches a passing test by the files it opened, and it
		// cannot see what `go list` read: list every package's directory and stat
		// its source files, so that a new file or a changed import is a reason to
		// run again.
		_, _ = os.ReadDir(f[3])
		for _, name := range strings.Fields(f[4]) {
			_, _ = os.Stat(filepath.Join(f[3], name))
		}
		p := pkg{path: rel(f[0]), imports: strings.Fields(f[1]), deps: strings.Fields(f[2])}
		pkgs[p.path] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the module has more", len(pkgs))
	}
	return pkgs
}

// rel is path relative to the module, or path as it is for other modules.
func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// violations lists the packages among ps that fail ok.
func violations(ps []string, ok func(string) bool) []string {
	var bad []string
	for _, p := range ps {
		if p = rel(p); !ok(p) {
			bad = append(bad, p)
		}
	}
	return bad
}

// TestLayering: the rules of DEVELOPERS.md, "Where code goes". A failure names
// the package and what it links that it must not.
func TestLayering(t *testing.T) {
	pkgs := list(t)
	wiring := func(p string) bool { return under(p, "services") || under(p, "cmd") || under(p, "integration") }
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := pkgs[name]
		// Domain packages know nothing of flags, listeners or Consul: services/
		// assembles them, cmd/tandem parses flags, and nothing below imports either.
		if !wiring(name) {
			if bad := violations(p.deps, func(d string) bool { return !wiring(d) }); len(bad) > 0 {
				t.Errorf("%s links %v: only services/, cmd/ and integration/ may depend on services/ or cmd/", name, bad)
			}
		}
		// Nor do they import the flag package or Consul's client themselves.
		if !wiring(name) {
			// Tracing's API (otel, otel/trace, otel/attribute) is a context lookup
			// when off; what makes and exports spans is wired by services/.
			if bad := violations(p.deps, func(d string) bool { return !tracingSDK(d) }); len(bad) > 0 {
				t.Errorf("%s links %v: only services/ sets up tracing; others use the OpenTelemetry API (internal/spans)", name, bad)
			}
		}
		if slices.ContainsFunc([]string{"frontend", "router", "prefill", "decode", "engine"}, func(d string) bool { return under(name, d) }) {
			if bad := violations(p.imports, func(d string) bool { return d != "flag" && !under(d, "github.com/hashicorp/consul") }); len(bad) > 0 {
				t.Errorf("%s imports %v: a domain package registers no flags and talks to no Consul (services/ wires them)", name, bad)
			}
		}
		// The engine runs a model; it knows no RPC message and no routing, nor
		// the serving layers above it (an engine server adapter included).
		if under(name, "engine") {
			above := []string{"handoff", "decode", "prefill", "worker", "frontend"}
			if bad := violations(p.deps, func(d string) bool {
				return !under(d, "proto") && !under(d, "router") && !slices.Contains(above, d)
			}); len(bad) > 0 {
				t.Errorf("%s links %v: the engine imports neither proto nor router, nor the layers that serve it", name, bad)
			}
		}
		// The decision, the ladder and the handoff do not know which engine is
		// behind a worker: they see engine.Engine and its optional interfaces.
		if slices.Contains([]string{"decode", "handoff", "prefill", "worker"}, name) {
			if bad := violations(p.deps, func(d string) bool { return !strings.HasPrefix(d, "engine/") }); len(bad) > 0 {
				t.Errorf("%s links %v: it must not know which engine runs the model", name, bad)
			}
		}
		// A fake engine server stands for software outside tandem, built from the
		// engines' documented protocols: it shares no code with what it tests.
		if name == "internal/testutil/fakeengine" {
			if bad := violations(p.deps, func(d string) bool { _, ours := pkgs[d]; return !ours }); len(bad) > 0 {
				t.Errorf("%s links %v: a fake engine server imports no tandem package", name, bad)
			}
		}
	}
	// The frontend tokenizes and routes; it runs no model and keeps no KV cache. (It
	// hashes blocks with kvcache/blockhash, shared by frontend, router and engine.)
	front := pkgs["frontend"]
	if len(front.deps) == 0 {
		t.Fatal("go list did not list the frontend")
	}
	if bad := violations(front.deps, func(d string) bool {
		return !under(d, "engine") && !slices.Contains([]string{"decode", "prefill", "handoff", "worker", "router", "kvcache"}, d)
	}); len(bad) > 0 {
		t.Errorf("frontend links %v: the frontend never imports the engine or the KV cache, nor the worker side", bad)
	}
	// The algorithm cores (the router's KV index, the decode worker's
	// estimators) are read without the service around them: they link no RPC
	// message, no transport and no serving layer.
	for _, core := range []string{"router/kvindex", "decode/estimate"} {
		if len(pkgs[core].deps) == 0 {
			t.Fatalf("go list did not list %s", core)
		}
		if bad := violations(pkgs[core].deps, func(d string) bool {
			return !under(d, "proto") && !under(d, "google.golang.org/grpc") && !under(d, "connectrpc.com") &&
				!slices.Contains([]string{"decode", "handoff", "prefill", "worker", "router"}, d)
		}); len(bad) > 0 {
			t.Errorf("%s links %v: an algorithm core knows no RPC, transport or serving layer", core, bad)
		}
	}
	// decode keeps the decision and the fallback ladder; the handoff's transport
	// is package handoff's.
	if bad := violations(pkgs["decode"].imports, func(d string) bool { return !under(d, "google.golang.org/grpc") }); len(bad) > 0 {
		t.Errorf("decode imports %v: it imports no transport (handoff owns it)", bad)
	}
}

// tracingSDK reports whether d is OpenTelemetry's SDK, an exporter or an
// instrumentation library, rather than its API.
func tracingSDK(d string) bool {
	return under(d, "go.opentelemetry.io/otel/sdk") || under(d, "go.opentelemetry.io/otel/exporters") ||
		under(d, "go.opentelemetry.io/contrib") || under(d, "connectrpc.com/otelconnect")
}
