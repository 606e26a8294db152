package consul

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Overlay decodes data, a JSON object, onto a copy of base, strictly: an unknown
// field, a wrong type or trailing data is an error naming what is wrong, so a typo
// in Consul KV is refused instead of silently ignored. Fields the JSON leaves out
// keep base's values (the process's flags), and validate checks the result.
func Overlay[T any](base T, data []byte, validate func(T) error) (T, error) {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return base, errors.New("decode: want a JSON object")
	}
	out := base
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return base, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return base, errors.New("decode: data after the JSON object")
	}
	if err := validate(out); err != nil {
		return base, err
	}
	return out, nil
}
