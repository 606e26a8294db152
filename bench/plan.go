package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// Run runs each of the plan's configurations in turn, printing each report to
// stdout as it ends, with a progress bar on stderr when that is a terminal.
// prefix starts each run's label. It stops early when ctx ends, returning what it
// has.
func (p *Plan) Run(ctx context.Context, prefix string, stdout, stderr io.Writer) ([]*Report, error) {
	return p.RunConfigs(ctx, nil, prefix, stdout, stderr)
}

// RunConfigs is Run for the configs whose indices are given (nil: all), each
// labelled as in a run of the whole plan, so that compare can run each load of
// a sweep on a deployment of its own.
func (p *Plan) RunConfigs(ctx context.Context, indices []int, prefix string, stdout, stderr io.Writer) ([]*Report, error) {
	var runs []*Report
	for _, w := range p.Warnings {
		p.sayOnce(stderr, "bench: warning: %s\n", w)
	}
	if err := p.sizePrompts(ctx, stderr); err != nil {
		return nil, err
	}
	if indices == nil {
		for i := range p.Configs {
			indices = append(indices, i)
		}
	}
	for _, i := range indices {
		if ctx.Err() != nil {
			break
		}
		cfg := p.Configs[i]
		wl, err := p.load(i)
		if err != nil {
			return runs, err
		}
		if pr, ok := wl.(Preparer); ok {
			if err := pr.Prepare(ctx, p.Client); err != nil {
				return runs, err
			}
		}
		label := p.Label(i, prefix)
		var bar *Bar
		if isTerminal(stderr) {
			bar = NewBar(stderr, label)
			cfg.Progress = bar.Update
		}
		rep, err := Run(ctx, cfg, wl, p.Client)
		if bar != nil {
			bar.Close()
		}
		if err != nil {
			return runs, err
		}
		rep.Label = label
		runs = append(runs, rep)
		if err := rep.WriteTable(stdout); err != nil {
			return runs, err
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted; the results above are what was measured")
	}
	return runs, nil
}

// Label is the label of config i's run: prefix and the config's own label, or
// the prefix alone (without its trailing space) when the plan has one config.
func (p *Plan) Label(i int, prefix string) string {
	if len(p.Configs) == 1 && prefix != "" {
		return strings.TrimSuffix(prefix, " ")
	}
	return prefix + p.Labels[i]
}

// load makes the workload of config i.
func (p *Plan) load(i int) (Workload, error) {
	if p.loadAt != nil {
		return p.loadAt(i)
	}
	return p.NewLoad()
}

// sizePrompts makes the plan's prompts tokens of the served model, when the
// server's /tokenize allows (else they stay cl100k's, as stderr says), and
// checks that the workload's longest request fits the model's context.
func (p *Plan) sizePrompts(ctx context.Context, stderr io.Writer) error {
	if p.base == nil {
		return nil
	}
	served, ctxLen, err := ServedPrompts(ctx, p.Client, p.base)
	if err != nil {
		p.prompts = p.base
		p.sayOnce(stderr, "bench: %s, not the served model's: %v\n", p.base.sizeNote(), err)
		return nil
	}
	p.prompts = served
	p.sayOnce(stderr, "bench: %s\n", served.sizeNote())
	wl, err := p.NewLoad()
	if err != nil {
		return err
	}
	if l, ok := wl.(interface{ Longest() (int, string) }); ok && ctxLen > 0 {
		if n, what := l.Longest(); n > ctxLen {
			return fmt.Errorf("bench: %s: the longest request is about %d tokens of %s (%s), over its context length of %d tokens",
				wl.Name(), n, served.served, what, ctxLen)
		}
	}
	return nil
}

// sayOnce writes a line to stderr unless the plan's runs already have. compare
// runs the plan again on each fresh start of a deployment, one per load of a
// sweep, and each start sized the prompts and warned again, the same lines
// burying the starts between them; a line that differs (another model served,
// another reason sizing failed) is still said.
func (p *Plan) sayOnce(stderr io.Writer, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if p.said[line] {
		return
	}
	if p.said == nil {
		p.said = map[string]bool{}
	}
	p.said[line] = true
	io.WriteString(stderr, line)
}

// isTerminal reports whether w is a terminal, where a progress bar belongs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// File is the JSON a bench writes: the command that ran, its runs and, for a
// sweep judged under an SLO, each deployment's capacity.
type File struct {
	Command  []string       `json:"command"`
	Runs     []*Report      `json:"runs"`
	Capacity *CapacityTable `json:"capacity,omitempty"`
}

// WriteJSON writes runs and the command that made them to path, each request's
// result included only when perRequest is set.
func WriteJSON(path string, runs []*Report, command []string, perRequest bool) error {
	return File{Command: command, Runs: runs}.Write(path, perRequest)
}

// Write writes f to path, each request's result included only when perRequest
// is set.
func (f File) Write(path string, perRequest bool) error {
	out := f
	if !perRequest {
		out.Runs = make([]*Report, len(f.Runs))
		for i, r := range f.Runs {
			c := *r
			c.Requests = nil
			out.Runs[i] = &c
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
