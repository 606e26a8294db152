package engine

// StepReport is one engine step as the engine ran it: what a decode worker's
// TBT rule learns a step's time from. The gaps its own streams see mix plain
// steps with steps a prompt's chunk stretched, and a device that prefills
// without pause shows no plain step at all; the engine knows what each held.
type StepReport struct {
	Seconds float64 // how long the step took, wall clock
	Decode  int     // sequences that drew a token
	// PrefillTokens are the prompt tokens computed; PrefillPairs the attention
	// pairs among them and their context, the sum over chunks of n tokens after
	// o computed of n·(2o+n)/2, what makes a deep chunk cost more than a
	// shallow one of the same size.
	PrefillTokens int
	PrefillPairs  float64
	KVUsage       float64 // share of the KV pool in use, 0 to 1
}

// ChunkPairs is PrefillPairs for one chunk of n tokens after o computed.
func ChunkPairs(o, n int) float64 { return float64(n) * (2*float64(o) + float64(n)) / 2 }

// StepReporter is implemented by engines that report each step they run (sim
// and native). The engine servers tandem drives over HTTP report none: their
// decode workers keep learning steps from the gaps their streams see.
type StepReporter interface {
	// ObserveSteps has f called after every step, on the engine's stepping
	// goroutine (it must not block), until the engine closes. One observer: a
	// later call replaces the earlier.
	ObserveSteps(f func(StepReport))
}
