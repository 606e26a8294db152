package rpc

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/internal/testutil/slogtest"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// records keeps every log record, to check the level a call's end was logged at.
type records struct{ slogtest.Recorder }

func (r *records) only(t *testing.T) slog.Record {
	t.Helper()
	recs := r.Records()
	if len(recs) != 1 {
		t.Fatalf("%d log records, want 1", len(recs))
	}
	return recs[0]
}

func handledCodes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_rpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[labelOf(m, "code")] += m.GetCounter().GetValue()
		}
	}
	return got
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestCallEndLevelAndCode: a call that ends because its caller went away is logged
// below WARN and counted under code canceled, on both servers, whatever form the
// cancel took: Connect's unary handler returns the bare ctx.Err() when the caller
// had gone before the call began, a handler a Connect or grpc-go status. A deadline
// is deadline_exceeded, and a real failure still an ERROR.
func TestCallEndLevelAndCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     string
		maxLevel slog.Level // the record's level must be at most this
		minLevel slog.Level // and at least this
	}{
		{"bare context canceled", context.Canceled, "canceled", slog.LevelInfo, slog.LevelDebug},
		{"connect canceled", connect.NewError(connect.CodeCanceled, context.Canceled), "canceled", slog.LevelInfo, slog.LevelDebug},
		{"grpc status canceled", status.Error(codes.Canceled, "context canceled"), "canceled", slog.LevelInfo, slog.LevelDebug},
		{"bare deadline", context.DeadlineExceeded, "deadline_exceeded", slog.LevelWarn, slog.LevelWarn},
		{"unavailable", connect.NewError(connect.CodeUnavailable, errors.New("draining")), "unavailable", slog.LevelWarn, slog.LevelWarn},
		{"unclassified", errors.New("boom"), "unknown", slog.LevelError, slog.LevelError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, transport := range []string{"connect", "grpc"} {
				t.Run(transport, func(t *testing.T) {
					// Each server sends only its own kind of status; the other's is Unknown.
					var ce *connect.Error
					if _, isStatus := status.FromError(tc.err); isStatus && transport == "connect" {
						t.Skip("a Connect handler does not send grpc-go statuses")
					}
					if errors.As(tc.err, &ce) && transport == "grpc" {
						t.Skip("a grpc-go handler does not send Connect errors")
					}
					recs := &records{}
					reg := prometheus.NewRegistry()
					i := &ServerInterceptor{Logger: slog.New(recs), Metrics: NewServerMetrics(reg)}
					var err error
					switch transport {
					case "connect":
						next := i.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, tc.err })
						_, err = next(t.Context(), connect.NewRequest(&workerv1.InfoRequest{}))
					case "grpc":
						_, err = i.grpcUnary(t.Context(), &workerv1.InfoRequest{}, &grpc.UnaryServerInfo{FullMethod: "/tandem.worker.v1.WorkerService/Info"},
							func(context.Context, any) (any, error) { return nil, tc.err })
					}
					if err != tc.err {
						t.Errorf("the interceptor changed the handler's error %v to %v", tc.err, err)
					}
					rec := recs.only(t)
					if rec.Level > tc.maxLevel || rec.Level < tc.minLevel {
						t.Errorf("call ending in %v logged at %v, want between %v and %v", tc.err, rec.Level, tc.minLevel, tc.maxLevel)
					}
					if got := handledCodes(t, reg); got[tc.code] != 1 || len(got) != 1 {
						t.Errorf("tandem_rpc_server_handled_total by code = %v, want 1 under %q", got, tc.code)
					}
				})
			}
		})
	}
}
