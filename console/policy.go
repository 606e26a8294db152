package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxPolicyBytes bounds a policy request; a policy is a few hundred bytes.
const maxPolicyBytes = 64 << 10

// policyRequest is the body of POST /console/policy.
type policyRequest struct {
	// Target is "router", "decode" or "planner".
	Target string `json:"target"`
	// Value is the JSON object to store, with the fields of tandem config set.
	Value json.RawMessage `json:"value"`
}

// policyAnswer is the answer to it.
type policyAnswer struct {
	Target string          `json:"target,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
	Error  *policyError    `json:"error,omitempty"`
}

type policyError struct {
	Message string `json:"message"`
}

// servePolicy writes a runtime policy through the PolicyStore, after the same
// check the services apply (tandem config set's). The new policy reaches the page
// through the fleet events once the router and workers have applied it.
func (c *Console) servePolicy(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, format string, args ...any) {
		writeAnswer(w, status, policyAnswer{Error: &policyError{Message: fmt.Sprintf(format, args...)}})
	}
	if c.opts.Policy == nil {
		fail(http.StatusConflict, "this deployment keeps no runtime policy: start the router and workers with --consul to change it live")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPolicyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, "the request is larger than %d bytes", maxPolicyBytes)
			return
		}
		fail(http.StatusBadRequest, "reading the request: %v", err)
		return
	}
	var req policyRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(&req)
	if err == nil {
		if _, more := dec.Token(); !errors.Is(more, io.EOF) {
			err = errors.New("data after the JSON object")
		}
	}
	if err != nil {
		fail(http.StatusBadRequest, "the request must be {\"target\": \"router\", \"decode\" or \"planner\", \"value\": {...}}: %v", err)
		return
	}
	if err := c.opts.Policy.Check(req.Target, req.Value); err != nil {
		fail(http.StatusBadRequest, "%v", err)
		return
	}
	if err := c.opts.Policy.Set(r.Context(), req.Target, req.Value); err != nil {
		c.log.Warn("console: writing the runtime policy failed", "target", req.Target, "error", err)
		fail(http.StatusBadGateway, "%v", err)
		return
	}
	c.log.Info("console: runtime policy written", "target", req.Target, "value", string(req.Value))
	writeAnswer(w, http.StatusOK, policyAnswer{Target: req.Target, Value: req.Value})
}

func writeAnswer(w http.ResponseWriter, status int, a policyAnswer) {
	b, _ := json.Marshal(a) // a RawMessage that passed Check is valid JSON
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
