package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/timeout"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/tandem-serve/tandem/internal/requestid"
)

// ClientConfig shapes every outgoing connection of a process.
type ClientConfig struct {
	// UnaryTimeout bounds unary calls that carry no shorter deadline.
	UnaryTimeout time.Duration
	// Retries is how many times an idempotent call is retried on Unavailable.
	Retries uint
	Logger  *slog.Logger
	// TLS, when set, is used for every connection (mutual TLS when it carries a
	// certificate); nil means cleartext HTTP/2.
	TLS *tls.Config
	// Tracer, when set, makes a client span of every call (with the calling
	// service's provider) and sends its W3C traceparent.
	Tracer trace.TracerProvider
}

// A connection with calls in flight that has carried nothing for KeepaliveTime is
// pinged, and closed (failing its calls with Unavailable) when no answer comes
// within KeepaliveTimeout: a dead host is found in 10-15 s. 10 s is grpc-go's
// least; servers must let pings that often in (handoff.ServerOptions does).
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// Clients dials service-to-service connections that share one set of interceptors
// and one set of client metrics.
type Clients struct {
	cfg     ClientConfig
	metrics *grpcprom.ClientMetrics
}

// NewClients registers the client metrics with reg.
func NewClients(cfg ClientConfig, reg prometheus.Registerer) *Clients {
	if cfg.UnaryTimeout <= 0 {
		cfg.UnaryTimeout = 10 * time.Second
	}
	m := grpcprom.NewClientMetrics(
		grpcprom.WithClientCounterOptions(grpcprom.WithNamespace("tandem")),
		grpcprom.WithClientHandlingTimeHistogram(
			grpcprom.WithHistogramNamespace("tandem"),
			grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0005, 2.5, 14)),
		),
	)
	reg.MustRegister(m)
	return &Clients{cfg: cfg, metrics: m}
}

// Dial returns a lazily connecting client connection to addr (host:port), in
// cleartext HTTP/2.
func (c *Clients) Dial(addr string) (*grpc.ClientConn, error) { return c.DialWith(addr) }

// DialWith is Dial for any gRPC target (e.g. one of a manual resolver), with extra options.
func (c *Clients) DialWith(addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	log := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		c.cfg.Logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithFieldsFromContext(func(ctx context.Context) logging.Fields {
			if id := requestid.From(ctx); id != "" {
				return logging.Fields{"request_id", id}
			}
			return nil
		}),
		logging.WithLevels(clientLevel),
	}
	idempotent := selector.MatchFunc(func(_ context.Context, m interceptors.CallMeta) bool {
		return IsIdempotent(m.FullMethod())
	})
	retryOpts := []retry.CallOption{
		retry.WithMax(c.cfg.Retries),
		retry.WithCodes(codes.Unavailable),
		retry.WithBackoff(retry.BackoffExponentialWithJitter(50*time.Millisecond, 0.2)),
	}
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A peer whose host dies sends no RST: without pings a stream waiting for
		// its next token would wait forever.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.WithChainUnaryInterceptor(
			propagateUnary,
			c.metrics.UnaryClientInterceptor(),
			logging.UnaryClientInterceptor(log, logOpts...),
			selector.UnaryClientInterceptor(retry.UnaryClientInterceptor(retryOpts...), idempotent),
			timeout.UnaryClientInterceptor(c.cfg.UnaryTimeout),
		),
		grpc.WithChainStreamInterceptor(
			propagateStream,
			c.metrics.StreamClientInterceptor(),
			logging.StreamClientInterceptor(log, logOpts...),
			selector.StreamClientInterceptor(retry.StreamClientInterceptor(retryOpts...), idempotent),
		),
	}, extra...)
	if c.cfg.Tracer != nil {
		opts = append(opts, traceClient(c.cfg.Tracer))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}

// clientLevel keeps routine outcomes (success, a caller's cancel) out of info logs.
func clientLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.Canceled:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return logging.LevelError
	}
	return logging.LevelWarn
}

// IsIdempotent reports whether a method is declared NO_SIDE_EFFECTS or IDEMPOTENT in
// its proto, so that the retry rule lives in the API definition, not in a list here.
func IsIdempotent(fullMethod string) bool {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(fullMethod, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return false
	}
	lvl := opts.GetIdempotencyLevel()
	return lvl == descriptorpb.MethodOptions_NO_SIDE_EFFECTS || lvl == descriptorpb.MethodOptions_IDEMPOTENT
}

func outgoing(ctx context.Context) context.Context {
	if id := requestid.From(ctx); id != "" {
		return metadata.AppendToOutgoingContext(ctx, requestid.Header, id)
	}
	return ctx
}

func propagateUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(outgoing(ctx), method, req, reply, cc, opts...)
}

func propagateStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer,
	opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(outgoing(ctx), desc, cc, method, opts...)
}
