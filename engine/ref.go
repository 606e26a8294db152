package engine

import (
	"context"
	"errors"
	"time"
)

// The handoff by reference. Engines that move KV between GPUs themselves (vLLM's
// NixlConnector, TensorRT-LLM's UCX/NIXL transceiver, SGLang's Mooncake or NIXL
// backends) cannot export blocks: their prefill returns the engine's own transfer
// parameters instead, opaque to tandem, which the decode worker's engine is given
// to pull (or receive) the KV. The decision, deadlines and fallback ladder around
// the two calls are the same as for a handoff of KV chunks.

// RefExporter is an engine whose prefill hands its KV over by reference.
type RefExporter interface {
	// ExportRef runs the prompt's prefill leg for a decode engine elsewhere. It
	// returns once the transfer parameters are known; the engine's own side of
	// the transfer may still be running (RefExport.Wait).
	ExportRef(ctx context.Context, req Request) (RefExport, error)
}

// RefExport is a prefill whose KV a decode engine fetches itself.
type RefExport interface {
	// Params are the engine's transfer parameters, opaque to tandem, for the
	// decode engine's RefImporter. Never empty.
	Params() []byte
	// Wait blocks until the prefill engine's side is over (for an engine whose
	// prefill and decode legs run at once, its prefill response); it reports
	// the prefill's failure.
	Wait(ctx context.Context) error
	QueueTime() time.Duration
	PrefillTime() time.Duration
	// Release lets go of anything the export holds. Safe to call twice.
	Release()
}

// RefImporter is an engine that takes a prompt's KV by reference.
type RefImporter interface {
	// ImportRef starts decoding req with the prefill engine's transfer
	// parameters; the engine fetches the KV itself. The stream lives as long as
	// ctx.
	ImportRef(ctx context.Context, req Request, params []byte) (Stream, error)
}

// ErrNoTransferParams is a prefill engine's answer without transfer parameters:
// the decode engine has nothing to fetch, so the request falls back.
var ErrNoTransferParams = errors.New("engine: the prefill returned no KV transfer parameters")

// ErrNoExport is a chunk export asked of an engine that moves KV only by
// reference, or the reverse.
var ErrNoExport = errors.New("engine: this engine does not hand KV over that way")

// ErrUnavailable is an engine server that cannot take a request now (HTTP 503 or
// 429, or no connection); another worker, or a later try, may.
var ErrUnavailable = errors.New("engine: the engine server cannot take the request now")

// ErrRejected is a request the engine server refused as invalid (HTTP 4xx).
var ErrRejected = errors.New("engine: the engine server refused the request")
