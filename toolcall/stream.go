package toolcall

import (
	"strings"
)

// Event is a piece of a reply as it streams: content text, or a fragment of call
// Index (its name on the first fragment, then pieces of its arguments text, which
// joined are the call's Arguments).
type Event struct {
	Content string
	Index   int
	// Name is set on a call's first fragment only.
	Name string
	Args string
	// IsCall tells a call fragment from content.
	IsCall bool
}

// format is what a family's stream needs to know about its text.
type format struct {
	// markers start a call; atStart: only at the start of the reply (Llama 3).
	markers []string
	atStart bool
	// list: the calls after a marker are a JSON list (Mistral's), joined by ",".
	list bool
	// closeTag ends each call (Hermes' "</tool_call>"); empty for none.
	closeTag string
	// sep may join calls without a new marker: ";" for Llama 3.
	sep string
}

// Stream splits a reply into content and calls as its text arrives. Content that
// may be the start of a call marker is held back until it is decided.
type Stream struct {
	f format
	// buf is the text received and not yet sent as content: in mText what may
	// start a marker, otherwise everything from the marker on; off is how much of
	// it is read, start where the current call's object begins.
	buf        string
	off, start int
	mode       int
	// calls are those complete, cur the one being written.
	calls    []Call
	cur      *objScanner
	curSent  bool // its first fragment has gone out
	argsSent int  // bytes of its arguments sent
	sawText  bool // non-space content was sent (Llama 3 looks only at the start)
	failed   bool
	content  strings.Builder
}

const (
	mText  = iota // content, looking for a marker
	mOpen         // after a marker: expect the call or the list
	mCall         // inside a call object
	mAfter        // after a call: close tag, separator, or the end
	mPlain        // no more calls: everything is content
)

func newStream(f format) *Stream { return &Stream{f: f} }

// Calls are the calls completed so far.
func (s *Stream) Calls() []Call { return s.calls }

// Failed reports whether a call was started and not finished in the format; its
// text was then sent as content.
func (s *Stream) Failed() bool { return s.failed }

// Content is all content sent so far.
func (s *Stream) Content() string { return s.content.String() }

// Push takes the next piece of the reply and returns what can be sent now.
func (s *Stream) Push(text string) []Event {
	s.buf += text
	var out []Event
	for {
		ev, progressed := s.step(false)
		out = append(out, ev...)
		if !progressed {
			return out
		}
	}
}

// Close ends the reply: whatever is held back is decided, and a call left
// unfinished is a failure whose text is sent as content.
func (s *Stream) Close() []Event {
	var out []Event
	for {
		ev, progressed := s.step(true)
		out = append(out, ev...)
		if !progressed {
			break
		}
	}
	if s.mode == mCall {
		out = append(out, s.fail()...)
	}
	switch rest := s.buf[s.off:]; {
	case s.mode == mText || s.mode == mPlain:
		out = append(out, s.text(s.buf))
	case s.mode == mOpen && len(s.calls) == 0:
		// A marker and nothing after it.
		s.failed = true
		out = append(out, s.text(s.buf))
	case strings.TrimSpace(rest) != "":
		// A list left open, a close tag begun: the calls stand, the rest is text.
		out = append(out, s.text(rest))
	}
	s.buf, s.off = "", 0
	return dropEmpty(out)
}

func dropEmpty(evs []Event) []Event {
	out := evs[:0]
	for _, e := range evs {
		if e.IsCall || e.Content != "" {
			out = append(out, e)
		}
	}
	return out
}

func (s *Stream) text(t string) Event {
	if strings.TrimSpace(t) != "" {
		s.sawText = true
	}
	s.content.WriteString(t)
	return Event{Content: t}
}

// fail turns the call being read, and what follows, into content.
func (s *Stream) fail() []Event {
	s.failed = true
	s.mode = mPlain
	s.cur = nil
	t := s.buf
	s.buf, s.off = "", 0
	return []Event{s.text(t)}
}

// step makes what progress the text allows; final says no more text will come.
func (s *Stream) step(final bool) ([]Event, bool) {
	switch s.mode {
	case mPlain:
		if s.buf == "" {
			return nil, false
		}
		t := s.buf
		s.buf = ""
		return []Event{s.text(t)}, false
	case mText:
		return s.stepText(final)
	case mOpen:
		return s.stepOpen(final)
	case mCall:
		return s.stepCall()
	default:
		return s.stepAfter(final)
	}
}

func (s *Stream) stepText(final bool) ([]Event, bool) {
	if s.f.atStart {
		t := strings.TrimLeft(s.buf, " \t\r\n")
		switch {
		case s.sawText:
			s.mode = mPlain
			return nil, true
		case t == "" && !final:
			return nil, false
		}
		for _, m := range s.f.markers {
			if strings.HasPrefix(t, m) {
				s.buf, s.off, s.mode = t, len(m), mOpen
				if m == "{" {
					s.off = 0 // the marker is the call's own brace
				}
				return nil, true
			}
			if !final && strings.HasPrefix(m, t) {
				return nil, false
			}
		}
		s.mode = mPlain
		return nil, true
	}
	if k := firstMarker(s.buf, s.f.markers); k >= 0 {
		var out []Event
		// White space between the content and a call is the template's, not content.
		before := strings.TrimRight(s.buf[:k], " \t\r\n")
		if before != "" {
			out = append(out, s.text(before))
		}
		// The white space stays in buf, sent only if the call fails.
		s.buf = s.buf[len(before):]
		for _, m := range s.f.markers {
			if strings.HasPrefix(s.buf[k-len(before):], m) {
				s.off = k - len(before) + len(m)
				break
			}
		}
		s.mode = mOpen
		return out, true
	}
	if final {
		return nil, false
	}
	hold := heldBack(s.buf, s.f.markers)
	send := strings.TrimRight(s.buf[:len(s.buf)-hold], " \t\r\n")
	if send == "" {
		return nil, false
	}
	s.buf = s.buf[len(send):]
	return []Event{s.text(send)}, false
}

// skipSpace moves off past white space; false when the buffer ends first.
func (s *Stream) skipSpace() bool {
	for s.off < len(s.buf) {
		switch s.buf[s.off] {
		case ' ', '\t', '\r', '\n':
			s.off++
		default:
			return true
		}
	}
	return false
}

func (s *Stream) stepOpen(final bool) ([]Event, bool) {
	if !s.skipSpace() {
		return nil, false
	}
	if s.f.list && s.buf[s.off] == '[' {
		s.off++
		if !s.skipSpace() {
			return nil, false
		}
	}
	if s.buf[s.off] != '{' {
		return s.fail(), false
	}
	s.start, s.cur, s.curSent, s.argsSent = s.off, newObjScanner(), false, 0
	s.mode = mCall
	return nil, true
}

func (s *Stream) stepCall() ([]Event, bool) {
	obj := s.buf[s.start:]
	c := s.cur
	c.scan(obj)
	if c.bad {
		return s.fail(), false
	}
	var out []Event
	idx := len(s.calls)
	if c.haveName && !s.curSent {
		s.curSent = true
		out = append(out, Event{IsCall: true, Index: idx, Name: c.name})
	}
	if s.curSent && c.argsStart >= 0 && !c.argsString {
		end := len(obj)
		if c.argsEnd >= 0 {
			end = c.argsEnd
		}
		if from := c.argsStart + s.argsSent; end > from {
			out = append(out, Event{IsCall: true, Index: idx, Args: obj[from:end]})
			s.argsSent = end - c.argsStart
		}
	}
	if !c.done {
		return out, false
	}
	call, ok := decodeCall([]byte(obj[:c.end]))
	if !ok || !s.curSent {
		return append(out, s.fail()...), false
	}
	if c.argsString || c.argsStart < 0 {
		// The arguments were a JSON string (or absent): sent once decoded.
		out = append(out, Event{IsCall: true, Index: idx, Args: call.Arguments})
	} else {
		call.Arguments = strings.TrimSpace(obj[c.argsStart:c.argsEnd])
	}
	s.calls = append(s.calls, call)
	s.cur = nil
	s.off = s.start + c.end
	s.mode = mAfter
	return out, true
}

func (s *Stream) stepAfter(final bool) ([]Event, bool) {
	if !s.skipSpace() {
		return nil, false
	}
	rest := s.buf[s.off:]
	if tag := s.f.closeTag; tag != "" {
		if strings.HasPrefix(rest, tag) {
			// Back to content: another marker may start another call.
			s.buf, s.off, s.mode = rest[len(tag):], 0, mText
			return nil, true
		}
		if !final && strings.HasPrefix(tag, rest) {
			return nil, false
		}
	}
	if s.f.list {
		switch rest[0] {
		case ',':
			s.off++
			s.mode = mOpen
			return nil, true
		case ']':
			s.buf, s.off, s.mode = rest[1:], 0, mPlain
			return nil, true
		}
	}
	if sep := s.f.sep; sep != "" && strings.HasPrefix(rest, sep) {
		s.off += len(sep)
		s.mode = mOpen
		return nil, true
	}
	if s.f.closeTag != "" {
		// A complete call without its close tag: look for the next marker.
		s.buf, s.off, s.mode = rest, 0, mText
		return nil, true
	}
	// Text after the calls is content.
	s.buf, s.off, s.mode = rest, 0, mPlain
	return nil, true
}
