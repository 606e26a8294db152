package handoff

import (
	"reflect"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// Every sampling control survives the wire to the prefill worker, which draws the
// first token under them.
func TestSamplingRoundTrip(t *testing.T) {
	s := engine.Sampling{Temperature: 0.7, TopP: 0.9, TopK: 40, Seed: 7, PresencePenalty: 0.5, FrequencyPenalty: -0.25,
		RepetitionPenalty: 1.25, LogitBias: map[uint32]float32{5: -100, 8: 2.5}, MinP: 0.125}
	if got := Sampling(SamplingProto(s)); !reflect.DeepEqual(got, s) {
		t.Errorf("round trip %+v, want %+v", got, s)
	}
}
