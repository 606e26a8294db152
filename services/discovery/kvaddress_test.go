package discovery

import "testing"

func TestKVAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.7:9000":  "10.0.0.7:9401",
		"[::1]:9000":     "[::1]:9401",
		"prefill-3:9000": "prefill-3:9401",
	} {
		if got, err := kvAddress(addr, 9401); err != nil || got != want {
			t.Errorf("kvAddress(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := kvAddress("no-port", 9401); err == nil {
		t.Error("kvAddress of an address without a port: no error")
	}
}
