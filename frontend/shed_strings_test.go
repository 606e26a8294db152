package frontend

import (
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/decode"
)

// The frontend knows a shed by the ErrorInfo strings the decode worker writes,
// kept as its own constants so that the domain package need not import decode.
// Were they to drift apart, every shed would be offered again as if refused for
// room, and --refused-hold would hold requests no worker can meet in time.
func TestShedStringsAreDecodes(t *testing.T) {
	if decodeErrorDomain != decode.ErrorDomain {
		t.Errorf("frontend reads ErrorInfo domain %q, decode writes %q", decodeErrorDomain, decode.ErrorDomain)
	}
	if want := strings.ToUpper(decode.RejectTTFTUnmeetable); reasonShed != want {
		t.Errorf("frontend reads a shed as reason %q, decode writes %q", reasonShed, want)
	}
}
