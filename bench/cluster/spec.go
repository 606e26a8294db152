package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Parse resolves a comma-separated list of deployment specs on workers workers
// (the device count every deployment gets, so that they compare at equal
// hardware). A spec is
//
//	aggregated                 every worker prefills and decodes
//	POLICY                     one prefill worker, the rest decode with POLICY
//	POLICY@P                   P prefill workers, workers-P decode
//	POLICY@*                   every split, P = 1 .. workers-1, one deployment each
//	POLICY@P+A                 P prefill workers, A aggregated workers, the rest decode
//	SPEC{--flag v ...}         extra flags for that deployment's decode workers (the
//	                           aggregated workers of an aggregated deployment)
//	SPEC{...}{router: --f v}   extra flags for its router
//	SPEC{...}{frontend: --f v} extra flags for its frontend (e.g. --refused-hold 10s)
//	SPEC{...}{aggregated: --f} extra flags for the A aggregated workers of POLICY@P+A;
//	                           with --lend-prefill they lend prefill (role-flexible
//	                           workers) and the decode workers list them as prefill
//	                           workers, so POLICY@0+A{aggregated: --lend-prefill}
//	                           has no prefill worker at all (P = 0 needs lenders)
//
// Braces of each kind may come in any order and repeat; their flags add up.
// so that the best xP+yD split of plain disaggregation is found by running
// always-remote@*, and a design lever is a deployment with its flags, e.g.
// cost@1{--max-prefill-queue-tokens 8192}. The name is the spec as written.
func Parse(specs string, workers int) ([]Deployment, error) {
	var out []Deployment
	for _, spec := range splitSpecs(specs) {
		ds, err := parseOne(spec, workers)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if slices.ContainsFunc(out, func(o Deployment) bool { return o.Name == d.Name }) {
				return nil, fmt.Errorf("deployment %q is listed twice", d.Name)
			}
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no deployment in %q", specs)
	}
	return out, nil
}

// splitSpecs splits on the commas outside braces.
func splitSpecs(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				if t := strings.TrimSpace(s[start:i]); t != "" {
					out = append(out, t)
				}
				start = i + 1
			}
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, t)
	}
	return out
}

func parseOne(spec string, workers int) ([]Deployment, error) {
	head, flags, routerFlags, aggFlags, feFlags, err := cutFlags(spec)
	if err != nil {
		return nil, err
	}
	name, split, hasSplit := strings.Cut(head, "@")
	if name == "aggregated" {
		if hasSplit {
			return nil, fmt.Errorf("deployment %q: aggregated has no prefill workers to split off", spec)
		}
		if len(aggFlags) > 0 {
			return nil, fmt.Errorf("deployment %q: {aggregated: ...} is for the aggregated workers of POLICY@P+A; an aggregated deployment takes {--flags}", spec)
		}
		return []Deployment{{Name: spec, Mode: "aggregated", Decode: workers, ExtraDecodeFlags: flags, RouterFlags: routerFlags,
			FrontendFlags: feFlags}}, nil
	}
	if !slices.Contains(Policies, name) {
		return nil, fmt.Errorf("unknown deployment %q (aggregated, %s)", spec, strings.Join(Policies, ", "))
	}
	agg := 0
	if a, b, ok := strings.Cut(split, "+"); ok {
		n, err := strconv.Atoi(b)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("deployment %q: want POLICY@P+A, A aggregated workers (at least 1)", spec)
		}
		split, agg = a, n
	}
	var ps []int
	switch {
	case !hasSplit:
		ps = []int{1}
	case split == "*":
		for p := 1; p < workers; p++ {
			ps = append(ps, p)
		}
	default:
		p, err := strconv.Atoi(split)
		if err != nil || p < 0 || p+agg >= workers {
			return nil, fmt.Errorf("deployment %q: the prefill workers must be a number from 1 to %d (--workers %d less one decode worker)",
				spec, workers-1-agg, workers)
		}
		ps = []int{p}
	}
	if split == "*" && agg > 0 {
		return nil, fmt.Errorf("deployment %q: @* searches plain splits; give P with +A", spec)
	}
	if len(aggFlags) > 0 && agg == 0 {
		return nil, fmt.Errorf("deployment %q: {aggregated: ...} needs aggregated workers, POLICY@P+A", spec)
	}
	if d := (Deployment{Aggregated: agg, AggregatedFlags: aggFlags}); len(ps) == 1 && ps[0] == 0 && !d.Lends() {
		return nil, fmt.Errorf("deployment %q: no prefill worker for the decode workers; P = 0 needs aggregated workers that lend prefill, "+
			"POLICY@0+A{aggregated: --lend-prefill}", spec)
	}
	var out []Deployment
	for _, p := range ps {
		n := spec
		if split == "*" {
			n = strings.Replace(spec, "@*", "@"+strconv.Itoa(p), 1)
		}
		out = append(out, Deployment{Name: n, Mode: "decode", Policy: name, Prefill: p, Decode: workers - p - agg, Aggregated: agg,
			ExtraDecodeFlags: flags, RouterFlags: routerFlags, AggregatedFlags: aggFlags, FrontendFlags: feFlags})
	}
	return out, nil
}

// cutFlags splits "head{flags}{router: flags}{aggregated: flags}{frontend: flags}"
// into its parts.
func cutFlags(spec string) (head string, flags, routerFlags, aggFlags, feFlags []string, err error) {
	head, rest, ok := strings.Cut(spec, "{")
	head = strings.TrimSpace(head)
	for ok {
		var body string
		body, rest, ok = strings.Cut(rest, "}")
		if !ok {
			return "", nil, nil, nil, nil, fmt.Errorf("deployment %q: a '{' is not closed", spec)
		}
		body = strings.TrimSpace(body)
		if r, isRouter := strings.CutPrefix(body, "router:"); isRouter {
			routerFlags = append(routerFlags, strings.Fields(r)...)
		} else if a, isAgg := strings.CutPrefix(body, "aggregated:"); isAgg {
			aggFlags = append(aggFlags, strings.Fields(a)...)
		} else if f, isFE := strings.CutPrefix(body, "frontend:"); isFE {
			feFlags = append(feFlags, strings.Fields(f)...)
		} else {
			flags = append(flags, strings.Fields(body)...)
		}
		rest = strings.TrimSpace(rest)
		if rest == "" {
			break
		}
		if rest, ok = strings.CutPrefix(rest, "{"); !ok {
			return "", nil, nil, nil, nil, fmt.Errorf("deployment %q: unexpected %q after the flags", spec, rest)
		}
	}
	return head, flags, routerFlags, aggFlags, feFlags, nil
}
