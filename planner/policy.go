package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Policy is the planner's runtime policy (Consul KV tandem/config/planner).
type Policy struct {
	// Pin freezes the plan; null lets the planner decide.
	Pin *Pin `json:"pin"`
}

// Pin is an operator's fixed shape: Prefill of the workers prefill, prompts of
// ISLThreshold tokens or more are prefilled remotely; or, with Current, the
// shape the fleet has now.
type Pin struct {
	Current      bool `json:"current,omitempty"`
	Prefill      int  `json:"prefill,omitempty"`
	ISLThreshold int  `json:"isl_threshold,omitempty"`
}

// Validate names what is wrong.
func (p Policy) Validate() error {
	if p.Pin == nil {
		return nil
	}
	switch pin := *p.Pin; {
	case pin.Current && (pin.Prefill != 0 || pin.ISLThreshold != 0):
		return errors.New("pin: give current alone, or prefill and isl_threshold")
	case pin.Current:
		return nil
	case pin.Prefill < 0 || pin.Prefill > 1024:
		return fmt.Errorf("pin.prefill %d: want a number of workers in [0, 1024]", pin.Prefill)
	case pin.ISLThreshold < 0 || pin.ISLThreshold > 1<<20:
		return fmt.Errorf("pin.isl_threshold %d: want tokens in [0, %d]", pin.ISLThreshold, 1<<20)
	case pin.Prefill > 0 && pin.ISLThreshold == 0:
		return errors.New("pin: with prefill workers, give the isl_threshold from which prompts go to them")
	}
	return nil
}

// ParsePolicy decodes a policy strictly: unknown fields, trailing data and
// values out of range are errors.
func ParsePolicy(b []byte) (Policy, error) {
	var p Policy
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return p, errors.New("planner policy: want a JSON object, e.g. {\"pin\": {\"prefill\": 1, \"isl_threshold\": 2048}}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("planner policy: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Policy{}, errors.New("planner policy: data after the JSON object")
	}
	if err := p.Validate(); err != nil {
		return Policy{}, fmt.Errorf("planner policy: %w", err)
	}
	return p, nil
}
