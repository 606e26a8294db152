package frontend

import "strings"

// stopMatcher finds stop sequences in streamed text. A stop string may span tokens,
// so text that could be the start of one is held back until it either completes
// the stop (output ends before it) or cannot anymore (it is released).
type stopMatcher struct {
	stops []string
	held  string
}

// push adds text and returns what can be released. stopped means a stop string
// matched; out is then the text before it and nothing more will be released.
func (m *stopMatcher) push(text string) (out string, stopped bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	buf := m.held + text
	cut := -1
	for _, s := range m.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		m.held = ""
		return buf[:cut], true
	}
	keep := m.partialSuffix(buf)
	m.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// partialSuffix returns the length of the longest suffix of buf that is a proper
// prefix of some stop string. Such a suffix starts where a stop string starts, and
// stop strings are valid UTF-8, so it never cuts a character.
func (m *stopMatcher) partialSuffix(buf string) int {
	best := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(buf)); n > best; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// flush releases what is held once the stream ends without a match.
func (m *stopMatcher) flush() string {
	out := m.held
	m.held = ""
	return out
}
