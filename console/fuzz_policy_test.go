package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// jsonObjectStore accepts any JSON object as a policy, as a stand-in for
// tandem config set's check.
type jsonObjectStore struct{ got []byte }

func (s *jsonObjectStore) Check(target string, value []byte) error {
	if target != "router" && target != "decode" {
		return errors.New("want router or decode")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil || m == nil {
		return errors.New("want a JSON object")
	}
	return nil
}

func (s *jsonObjectStore) Set(_ context.Context, _ string, value []byte) error {
	s.got = append([]byte(nil), value...)
	return nil
}

// Whatever a client posts, the policy endpoint answers 200 or a 4xx with a JSON
// message, never panics, and stores exactly the value it was sent, only after the
// check passed.
func FuzzPolicyRequest(f *testing.F) {
	for _, seed := range []string{
		`{"target":"decode","value":{"policy":"cost"}}`,
		`{"target":"router","value":{"isl_gate":true,"isl_threshold":512}}`,
		`{"target":"router","value":null}`,
		`{"target":"decode","value":{}} {}`,
		`{"target":"x","value":[1,2]}`,
		`{"target":"decode","value":{"policy":"cost"},"extra":1}`,
		`[]`, `nul`, ``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		store := &jsonObjectStore{}
		h := New(Options{Policy: store}).Handler(http.NotFoundHandler())
		req := httptest.NewRequest("POST", "/console/policy", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var answer policyAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatalf("%d answer %q is not JSON: %v", rec.Code, rec.Body.String(), err)
		}
		switch rec.Code {
		case http.StatusOK:
			var sent policyRequest
			if err := json.Unmarshal([]byte(body), &sent); err != nil || string(store.got) != string(sent.Value) || answer.Target != sent.Target {
				t.Fatalf("stored %q for %q (answer %+v)", store.got, body, answer)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if answer.Error == nil || answer.Error.Message == "" || store.got != nil {
				t.Fatalf("%d for %q with answer %+v, stored %q", rec.Code, body, answer, store.got)
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
