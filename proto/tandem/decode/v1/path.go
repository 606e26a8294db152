package decodev1

// This file is written by hand, beside the generated code, so that the name of a
// prefill path is defined with the enum: the decode worker labels its metrics and
// logs with it, and the frontend its response header, body and metrics, without
// either depending on the other.

// Name is the name a prefill path goes by in headers, bodies, logs and metric
// labels: "local", "remote", "fallback", or "unknown" when unset.
func (x PrefillPath) Name() string {
	switch x {
	case PrefillPath_PREFILL_PATH_LOCAL:
		return "local"
	case PrefillPath_PREFILL_PATH_REMOTE:
		return "remote"
	case PrefillPath_PREFILL_PATH_FALLBACK:
		return "fallback"
	}
	return "unknown"
}
