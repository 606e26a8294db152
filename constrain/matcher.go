package constrain

// Matcher follows one sequence through an Automaton. It is not safe for
// concurrent use (its Automaton is).
type Matcher struct {
	a  *Automaton
	st *state
}

// Accepts reports whether token may come next (a token with no bytes never may).
func (m *Matcher) Accepts(token uint32) bool {
	b := m.a.vocab.Bytes(token)
	if len(b) == 0 {
		return false
	}
	m.a.mu.Lock()
	defer m.a.mu.Unlock()
	return m.a.walk(m.st, b) != dead
}

// Advance reads token and reports whether it was allowed; a refused token leaves
// the matcher as it was.
func (m *Matcher) Advance(token uint32) bool {
	return m.AdvanceBytes(m.a.vocab.Bytes(token))
}

// AdvanceBytes reads text and reports whether it was allowed; refused text leaves
// the matcher as it was.
func (m *Matcher) AdvanceBytes(text []byte) bool {
	if len(text) == 0 {
		return false
	}
	m.a.mu.Lock()
	defer m.a.mu.Unlock()
	n := m.a.walk(m.st, text)
	if n == dead {
		return false
	}
	m.st = n
	return true
}

// Complete reports whether the text read so far is a whole match, after which a
// stop token may end the sequence.
func (m *Matcher) Complete() bool { return m.st.complete }

// Final reports whether the text is complete and nothing may follow it.
func (m *Matcher) Final() bool { return m.st.final }

// Mask returns the tokens allowed next, a bit per id (bit i%64 of word i/64). The
// slice is shared: read it, never write it.
func (m *Matcher) Mask() []uint64 {
	m.a.mu.Lock()
	defer m.a.mu.Unlock()
	return m.a.mask(m.st)
}

// Allowed reports whether bit id of mask is set.
func Allowed(mask []uint64, id uint32) bool {
	return int(id>>6) < len(mask) && mask[id>>6]&(1<<(id&63)) != 0
}
