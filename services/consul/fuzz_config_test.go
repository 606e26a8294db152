package consul

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/router"
)

// FuzzOverlay throws arbitrary bytes at the runtime-policy decoder with both
// policies that live in Consul KV, the router's and the decode worker's. Whatever
// the bytes, it does not panic, and a refusal leaves the last good value (base)
// untouched. What it accepts validates, is exactly one JSON object with nothing
// after it, names only known fields (encoding/json matches names
// case-insensitively), keeps base's value for every field it does not name, and
// survives a round trip through JSON onto any other base. A well-formed object
// naming a field that does not exist is always refused.
//
//	go test ./services/consul -run '^$' -fuzz FuzzOverlay -fuzztime 60s
func FuzzOverlay(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"policy":"cost","short_prefill_threshold":256,"itl_weight":0.5,"enforce_disagg":false,"max_prefill_queue_tokens":4096}`,
		`{"prefill_weight":2,"queue_weight":0.5,"temperature":0.1,"isl_gate":true,"isl_threshold":512,"isl_adaptive":true,"isl_min":64,` +
			`"isl_max":2048,"isl_step":32,"isl_margin":1.5,"isl_hysteresis":8}`,
		` {"policy":"always-remote"}` + "\n",
		`{"policy":"always_remote"}`,
		`{"polcy":"cost"}`,
		`{"POLICY":"cost"}`,
		`{"policy":"cost","policy":"bogus"}`,
		`{"policy":null,"isl_gate":null}`,
		`{"short_prefill_threshold":-1}`,
		`{"short_prefill_threshold":1e3}`,
		`{"isl_threshold":9223372036854775808}`,
		`{"temperature":1e309}`,
		`{"itl_weight":"0.5"}`,
		`{"isl_min":100,"isl_max":10}`,
		`{"isl_adaptive":true,"isl_threshold":1}`,
		`{"policy":{"name":"cost"}}`,
		`{"policy":"cost"} {"policy":"threshold"}`,
		`{"policy":"cost"} trailing`,
		`{"policy":"always-local"}}`,
		`[{"policy":"cost"}]`,
		`"cost"`,
		`null`,
		``,
		"\ufeff{}",
		"{\"policy\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	routerBase := router.DefaultParams()
	decodeBase := decode.Params{Policy: decode.PolicyThreshold, ThresholdParams: decode.ThresholdParams{ShortPrefillThreshold: 1024},
		CostParams: decode.CostParams{ITLWeight: 0.25}}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkOverlay(t, data, routerBase, router.Params{ISLStep: 1, ISLHysteresis: 1}, router.Params.Validate)
		checkOverlay(t, data, decodeBase, decode.Params{Policy: decode.PolicyAlwaysLocal}, decode.Params.Validate)
	})
}

// jsonNames lists T's JSON field names, which must all be set by tags, with
// where each field is: a struct embedded in T (decode.Params's per-policy
// parameters) has its fields named at T's top level, as encoding/json does.
func jsonNames[T any](t *testing.T) ([]string, [][]int) {
	rt := reflect.TypeFor[T]()
	var names []string
	var at [][]int
	for _, f := range reflect.VisibleFields(rt) {
		if f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("%s.%s has no JSON name", rt, f.Name)
		}
		names, at = append(names, name), append(at, f.Index)
	}
	return names, at
}

func knownName(names []string, key string) (string, bool) {
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n, true
		}
	}
	return "", false
}

func checkOverlay[T comparable](t *testing.T, data []byte, base, other T, validate func(T) error) {
	t.Helper()
	typ := reflect.TypeFor[T]().String()
	names, at := jsonNames[T](t)
	out, err := Overlay(base, data, validate)

	// The keys of data's first JSON value, if it is an object, and whether that
	// object is all there is.
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	firstIsObject := bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) && dec.Decode(&obj) == nil
	rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")
	isObject := firstIsObject && len(rest) == 0
	named := map[string]bool{}
	unknown := ""
	for k := range obj {
		if n, ok := knownName(names, k); ok {
			named[n] = true
		} else {
			unknown = k
		}
	}

	if err != nil {
		if out != base {
			t.Fatalf("%s: refused (%v) but returned %+v, not the base %+v", typ, err, out, base)
		}
		return
	}
	if unknown != "" {
		t.Fatalf("%s: accepted %q, which names the unknown field %q", typ, data, unknown)
	}
	if verr := validate(out); verr != nil {
		t.Fatalf("%s: accepted %q as %+v, which does not validate: %v", typ, data, out, verr)
	}
	if !isObject {
		t.Fatalf("%s: accepted %q, which is not exactly one JSON object", typ, data)
	}
	bv, ov := reflect.ValueOf(base), reflect.ValueOf(out)
	for i, n := range names {
		if !named[n] && !ov.FieldByIndex(at[i]).Equal(bv.FieldByIndex(at[i])) {
			t.Fatalf("%s: %q does not name %s, yet it changed from %v to %v", typ, data, n, bv.FieldByIndex(at[i]), ov.FieldByIndex(at[i]))
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatalf("%s: accepted value %+v does not marshal: %v", typ, out, err)
	}
	back, err := Overlay(other, b, validate)
	if err != nil || back != out {
		t.Fatalf("%s: %s does not round-trip: got %+v, %v; want %+v", typ, b, back, err, out)
	}
}
