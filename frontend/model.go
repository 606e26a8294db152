package frontend

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/tokenizer"
)

// Model is what the frontend serves: the model id clients name, and everything the
// pipeline needs to turn their requests into tokens. services/ builds it from a
// worker's model card, so the frontend repeats none of the model's settings.
type Model struct {
	// ID is the one model id served; requests naming another get 404.
	ID string
	// Fingerprint names the weights; only workers serving them are routed to.
	Fingerprint string
	// ContextLength is the model's context in tokens: prompt plus output.
	ContextLength int
	Tokenizer     tokenizer.Tokenizer
	Template      ChatTemplate
}

// Validate reports every problem in m at once.
func (m *Model) Validate() error {
	var errs []error
	if m.ID == "" {
		errs = append(errs, errors.New("frontend: model id must not be empty"))
	}
	if m.ContextLength < 2 {
		errs = append(errs, fmt.Errorf("frontend: context length %d must be at least 2 (one prompt token, one output token)", m.ContextLength))
	}
	if m.Tokenizer == nil || m.Template == nil {
		errs = append(errs, errors.New("frontend: a model needs a tokenizer and a chat template"))
	}
	return errors.Join(errs...)
}

// SetModel sets the model served from now on; requests already running finish with
// the one they started with.
func (f *Frontend) SetModel(m *Model) error {
	if err := m.Validate(); err != nil {
		return err
	}
	f.model.Store(m)
	return nil
}

// Model is the model served now, nil before the first SetModel.
func (f *Frontend) Model() *Model { return f.model.Load() }

// errNoModel is the answer until a worker has told the frontend what it serves.
var errNoModel = &apiError{code: connect.CodeUnavailable,
	msg: "no model is loaded yet: no worker has published its model card; retry shortly"}

// errBackendDown is /readyz's answer while the backend cannot place requests.
var errBackendDown = &apiError{code: connect.CodeUnavailable,
	msg: "the router is not serving yet: this frontend cannot place requests; retry shortly"}

// SetBackendServing records whether the backend (the router) can place
// requests, for /readyz. A new Frontend takes it to serve.
func (f *Frontend) SetBackendServing(serving bool) { f.backendDown.Store(!serving) }

// Ready is nil when the frontend can serve a request: a model loaded and the
// backend serving (SetBackendServing); else why not.
func (f *Frontend) Ready() error {
	if f.model.Load() == nil {
		return errNoModel
	}
	if f.backendDown.Load() {
		return errBackendDown
	}
	return nil
}

// current is the model a request runs with, or errNoModel.
func (f *Frontend) current() (*Model, error) {
	if m := f.model.Load(); m != nil {
		return m, nil
	}
	return nil, errNoModel
}
