// Package requestid is the request id every service puts on its log lines: the
// header that carries it between the client, the frontend and every service
// behind it, how a new one is made, and the context that carries it within a
// process (services/rpc's interceptors read and write it).
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Header carries the request id in and out of every service, in HTTP headers and
// gRPC metadata alike (gRPC spells it in lower case).
const Header = "X-Request-Id"

// New returns a random 128-bit id in hex.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Keep is given if it is a sane header value (printable ASCII, at most 128 bytes),
// so that a client's own id can be followed through every service's logs, and a
// new id otherwise.
func Keep(given string) string {
	if given != "" && len(given) <= 128 && printableASCII(given) {
		return given
	}
	return New()
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

type ctxKey struct{}

// With returns a context carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the context's request id, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}
