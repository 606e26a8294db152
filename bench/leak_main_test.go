package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started (the runner's
// clients, progress bars, test servers) outlives them and their cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
