// Package frontend is tandem's front door: the OpenAI-compatible HTTP API and the
// Connect/gRPC FrontendService. Both run one pipeline: validate, apply the chat
// template, tokenize, hand the tokens to the Backend (router + decode worker),
// detokenize the stream without splitting characters, and cut it at stop strings.
//
// Every generation response says how its prompt was prefilled, in the header
// X-Tandem-Prefill-Path (local, remote, fallback; "unknown" if the backend did not
// say) and, on the non-streamed body and the first streamed chunk, in an extension
// field OpenAI clients ignore:
//
//	"tandem": {"prefill_path": "remote", "prefill_reason": "above_threshold",
//	           "prefill_detail": "...", "decode_worker": "decode-1",
//	           "prefill_worker": "prefill-7", "route_reason": "..."}
//
// The package opens no listeners and reads no flags; services/ mounts HTTPHandler
// and ConnectHandler on its port.
package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/constrain"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

// HeaderPrefillPath says how the prompt was prefilled: local, remote or fallback.
const HeaderPrefillPath = "X-Tandem-Prefill-Path"

// Frontend serves generation requests over HTTP (OpenAI API) and Connect/gRPC.
type Frontend struct {
	cfg     Config
	model   atomic.Pointer[Model]
	backend Backend
	log     *slog.Logger
	metrics *metrics
	created int64
	keys    *apiKeys // nil: no authentication
	// outcomes hears every request's Outcome (OnOutcome); nil: nobody.
	outcomes atomic.Pointer[func(Outcome)]
	// backendDown: the backend said it cannot place requests (SetBackendServing).
	backendDown atomic.Bool
	// constraints are the response formats compiled so far, to refuse a schema
	// outside the supported subset early (workers compile their own, per vocabulary).
	constraints *constrain.Cache
}

var _ frontendv1connect.FrontendServiceHandler = (*Frontend)(nil)

// New returns a Frontend serving model, or, when model is nil, answering 503 until
// SetModel is called. reg may be nil to leave metrics unregistered.
func New(cfg Config, model *Model, backend Backend, logger *slog.Logger, reg prometheus.Registerer) (*Frontend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if backend == nil || logger == nil {
		return nil, errors.New("frontend: backend and logger are required")
	}
	if model != nil {
		if err := model.Validate(); err != nil {
			return nil, err
		}
	}
	m := newMetrics(reg)
	if cfg.MaxInFlight > 0 {
		backend = admittedBackend{Backend: backend, a: newAdmission(cfg.MaxInFlight, cfg.MaxQueue, cfg.QueueTimeout, m)}
	}
	f := &Frontend{constraints: constrain.NewCache(nil, constraintCacheSize),
		cfg: cfg, backend: backend, log: logger,
		metrics: m,
		created: time.Now().Unix(),
		keys:    newAPIKeys(cfg.APIKeys),
	}
	if model != nil {
		f.model.Store(model)
	}
	return f, nil
}

// ConnectHandler returns the FrontendService's path prefix and handler, for
// Connect, gRPC and gRPC-Web clients. A panic in a call becomes an Internal error.
func (f *Frontend) ConnectHandler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append([]connect.HandlerOption{connect.WithRecover(f.recoverConnect)}, opts...)
	if f.keys != nil {
		opts = append(opts, connect.WithInterceptors(authInterceptor{f.keys}))
	}
	return frontendv1connect.NewFrontendServiceHandler(f, opts...)
}

func (f *Frontend) recoverConnect(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
	f.log.ErrorContext(ctx, "panic in Connect call", "procedure", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}
