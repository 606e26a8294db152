package workersvc

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
)

// The flags that set decode.Config's admission limits, registered in config.go
// under these names and named in the refusals below.
const (
	flagMaxRunning       = "max-running-requests"
	flagMaxKVUsage       = "max-kv-usage"
	flagMaxWaitingTokens = "max-waiting-tokens"
	flagShedTTFTFactor   = "shed-ttft-factor"
	flagKVPrecheck       = "kv-precheck"
	flagTTFTSLO          = "ttft-slo-ms"
)

// limitFlags names, by refusal reason, the flag an operator changes to move the
// limit a decode worker refused on.
var limitFlags = map[string]string{
	decode.RejectMaxRunning:    flagMaxRunning,
	decode.RejectKVUsage:       flagMaxKVUsage,
	decode.RejectWaitingTokens: flagMaxWaitingTokens,
	// Both kinds of kv_blocks refusal carry the reason, but only the one
	// before the prefill is a LimitError, and the flag is what turns it off.
	decode.RejectKVBlocks:       flagKVPrecheck,
	decode.RejectTTFTUnmeetable: flagShedTTFTFactor,
}

// decodeHandler serves the decode service with its admission refusals naming the
// flag that sets the limit: decode names its Config field (it knows no flags),
// and the user who reads the 429 wants the flag.
func decodeHandler(svc decodev1connect.DecodeServiceHandler, opts []connect.HandlerOption) (string, http.Handler) {
	return decodev1connect.NewDecodeServiceHandler(svc, append(slices.Clip(opts), connect.WithInterceptors(flagNamer{}))...)
}

// flagNamer rewrites a decode.LimitError's status message to name the flag.
type flagNamer struct{}

func (flagNamer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, flagNamed(err)
	}
}

func (flagNamer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (flagNamer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return flagNamed(next(ctx, conn))
	}
}

// flagNamed is err with a limit refusal's Config field replaced by its flag,
// keeping the code; any other error as it is.
func flagNamed(err error) error {
	var le *decode.LimitError
	if !errors.As(err, &le) {
		return err
	}
	flag, ok := limitFlags[le.Reason]
	if !ok {
		return err
	}
	named := connect.NewError(connect.CodeOf(err), errors.New(le.Named("--"+flag)))
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			named.AddDetail(d) // the refusal's reason (ErrorInfo), for the frontend
		}
	}
	return named
}
