package frontend

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/requestid"
)

// apiKeys checks bearer tokens. Keys are kept only as SHA-256 digests and compared
// in constant time, so neither memory dumps nor timing reveal them.
type apiKeys struct {
	digests [][sha256.Size]byte
}

func newAPIKeys(keys []string) *apiKeys {
	if len(keys) == 0 {
		return nil
	}
	a := &apiKeys{}
	for _, k := range keys {
		a.digests = append(a.digests, sha256.Sum256([]byte(k)))
	}
	return a
}

// check returns nil when the Authorization header carries a known key.
func (a *apiKeys) check(authorization string) *apiError {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || token == "" {
		return &apiError{code: connect.CodeUnauthenticated, oaiCode: "invalid_api_key",
			msg: "no API key: send it as 'Authorization: Bearer YOUR_KEY'"}
	}
	d := sha256.Sum256([]byte(token))
	found := 0
	for _, k := range a.digests {
		found |= subtle.ConstantTimeCompare(d[:], k[:])
	}
	if found == 0 {
		return &apiError{code: connect.CodeUnauthenticated, oaiCode: "invalid_api_key", msg: "incorrect API key"}
	}
	return nil
}

// authInterceptor applies the keys to the Connect service.
type authInterceptor struct{ keys *apiKeys }

func (i authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if e := i.keys.check(req.Header().Get("Authorization")); e != nil && !req.Spec().IsClient {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(e.msg))
		}
		return next(ctx, req)
	}
}

func (i authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if e := i.keys.check(conn.RequestHeader().Get("Authorization")); e != nil {
			return connect.NewError(connect.CodeUnauthenticated, errors.New(e.msg))
		}
		return next(ctx, conn)
	}
}

// requireKey is the HTTP side: a 401 in OpenAI's shape, with the challenge header.
func (f *Frontend) requireKey(w http.ResponseWriter, r *http.Request, rc *reqCtx) bool {
	if f.keys == nil {
		return true
	}
	if e := f.keys.check(r.Header.Get("Authorization")); e != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
		f.writeError(w, rc, e)
		return false
	}
	return true
}

// RequireKey wraps h so that, when the frontend has API keys, a request without a
// valid one gets the API's own 401: the console's data is no more open than the
// model.
func (f *Frontend) RequireKey(h http.Handler) http.Handler {
	if f.keys == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestid.Keep(r.Header.Get(requestid.Header))
		rc := &reqCtx{id: id, log: f.log.With("request_id", id, "endpoint", "console"), start: time.Now(), endpoint: "console"}
		if f.requireKey(w, r, rc) {
			h.ServeHTTP(w, r)
		}
	})
}
