package frontend

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started outlives them
// and their cleanups.
//
// HTTP/1 client connections are exempt: TestAPIKeys (auth_test.go) never closes the
// body of its GET /healthz, so that connection's read and write loops wait for it
// forever. They are the test's client, not the frontend's; drop these two options
// once that body is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
