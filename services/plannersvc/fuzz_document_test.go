package plannersvc

import (
	"encoding/json"
	"testing"

	"github.com/tandem-serve/tandem/planner"
)

// Whatever is in tandem/planner/plan, ParseDocument returns a plan whose roles
// are prefill or decode and whose threshold is in range, or an error; never a
// panic. A plan it accepts survives a round trip through JSON, and its view
// converts.
func FuzzParseDocument(f *testing.F) {
	for _, seed := range []string{
		`{"shape": {"Prefill": 1, "Decode": 3, "Threshold": 2048}, "roles": {"lender-1": "prefill"}, "reason": "r", "at": "2026-12-07T06:00:00Z"}`,
		`{"roles": {"a": "both"}}`,
		`{"shape": {"Threshold": -5}}`,
		`{"pin": {"prefill": 1, "isl_threshold": 4}, "pinned": true, "switches": [{"at": "2026-12-07T06:00:00Z", "roles": null}]}`,
		`{} {}`,
		`null`,
		`{"rate": 1e400}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDocument([]byte(s))
		if err != nil {
			return
		}
		for id, r := range d.Roles {
			if r != planner.RolePrefill && r != planner.RoleDecode {
				t.Fatalf("accepted role %q for %q", r, id)
			}
		}
		if d.Shape.Threshold < 0 || d.Shape.Threshold > NoRemote {
			t.Fatalf("accepted threshold %d", d.Shape.Threshold)
		}
		b, err := json.Marshal(d)
		if err != nil {
			return // a number JSON cannot carry back (NaN cannot arrive; a huge one can)
		}
		if _, err := ParseDocument(b); err != nil {
			t.Fatalf("a plan it accepted, encoded again, is refused: %v (%s)", err, b)
		}
		_ = d.View("consul")
	})
}
