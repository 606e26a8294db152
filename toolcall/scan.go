package toolcall

import "encoding/json"

// objScanner follows a JSON object as its text arrives, well enough to find its
// top-level "name" string and the span of its arguments value while they are
// still being written. It checks only nesting; the whole object is validated
// with encoding/json once it closes.
type objScanner struct {
	pos      int // bytes of the buffer scanned
	depth    int
	inStr    bool
	esc      bool
	phase    int // at depth 1: what comes next
	keyStart int
	key      string
	valStart int
	valKind  byte // '{', '"' or 's' (scalar)

	name     string
	haveName bool
	// argsStart is where the arguments value starts (-1 until seen); argsEnd where
	// it ends (-1 while open); argsString: the value is a JSON string.
	argsStart, argsEnd int
	argsString         bool
	done               bool // the object has closed at end
	end                int
	bad                bool // the text cannot be a JSON object
}

const (
	phKey = iota
	phColon
	phValue
	phInValue
	phAfter
)

func newObjScanner() *objScanner { return &objScanner{argsStart: -1, argsEnd: -1} }

func isArgsKey(k string) bool { return k == "arguments" || k == "parameters" }

// scan reads buf from where it stopped; buf starts with the object's '{'.
func (s *objScanner) scan(buf string) {
	for ; s.pos < len(buf) && !s.done && !s.bad; s.pos++ {
		c := buf[s.pos]
		i := s.pos
		if s.inStr {
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
				if s.depth == 1 {
					s.stringClosed(buf, i)
				}
			}
			continue
		}
		if s.depth == 0 {
			if c != '{' {
				s.bad = true
				return
			}
			s.depth, s.phase = 1, phKey
			continue
		}
		if s.depth == 1 && s.phase == phInValue && s.valKind == 's' && (c == ',' || c == '}') {
			s.valueEnd(buf, i)
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			s.inStr = true
			if s.depth == 1 {
				switch s.phase {
				case phKey:
					s.keyStart = i
				case phValue:
					s.valueStart(i, '"')
				default:
					s.bad = true
				}
			}
		case '{', '[':
			if s.depth == 1 {
				if s.phase != phValue {
					s.bad = true
					return
				}
				s.valueStart(i, '{')
			}
			s.depth++
		case '}', ']':
			s.depth--
			switch {
			case s.depth == 1 && s.phase == phInValue:
				s.valueEnd(buf, i+1)
			case s.depth == 0:
				if c != '}' || s.phase == phColon || s.phase == phValue {
					s.bad = true
					return
				}
				s.done, s.end = true, i+1
			}
		case ':':
			if s.depth == 1 {
				if s.phase != phColon {
					s.bad = true
					return
				}
				s.phase = phValue
			}
		case ',':
			if s.depth == 1 {
				if s.phase != phAfter {
					s.bad = true
					return
				}
				s.phase = phKey
			}
		default:
			if s.depth == 1 {
				switch s.phase {
				case phValue:
					s.valueStart(i, 's')
				case phInValue:
				default:
					s.bad = true
					return
				}
			}
		}
	}
}

func (s *objScanner) stringClosed(buf string, i int) {
	switch s.phase {
	case phKey:
		if json.Unmarshal([]byte(buf[s.keyStart:i+1]), &s.key) != nil {
			s.bad = true
		}
		s.phase = phColon
	case phInValue:
		s.valueEnd(buf, i+1)
	}
}

func (s *objScanner) valueStart(i int, kind byte) {
	s.phase, s.valStart, s.valKind = phInValue, i, kind
	if isArgsKey(s.key) && s.argsStart < 0 {
		s.argsStart, s.argsString = i, kind == '"'
	}
}

func (s *objScanner) valueEnd(buf string, end int) {
	s.phase = phAfter
	switch {
	case s.key == "name" && s.valKind == '"' && !s.haveName:
		s.haveName = json.Unmarshal([]byte(buf[s.valStart:end]), &s.name) == nil && s.name != ""
	case isArgsKey(s.key) && s.argsStart == s.valStart:
		s.argsEnd = end
	}
}
