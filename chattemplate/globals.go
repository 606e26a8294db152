package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// raiseException replaces the library's raise_exception so that the template's
// refusal reaches the caller as a *RaiseError, distinct from a broken template.
func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), &RaiseError{Message: "the chat template raised an exception without a message"}
	}
	return jinja.Undefined(), &RaiseError{Message: text(args[0])}
}

// text is a value as Python's str() would print it into a message.
func text(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

// strftimeNow replaces the library's, which knows a dozen directives and reads the
// wall clock, with Python's directives (and glibc's "-" for no padding, which
// templates use as "%-d") on a clock tests can fix.
func strftimeNow(now func() time.Time) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now takes a format string")
		}
		return jinja.NewString(strftime(now(), args[0].AsString())), nil
	}
}

func strftime(t time.Time, format string) string {
	var sb strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			sb.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if pad {
				for len(s) < width {
					s = "0" + s
				}
			}
			sb.WriteString(s)
		}
		switch format[i] {
		case 'Y':
			num(t.Year(), 4)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if pad && len(s) < 2 {
				s = " " + s
			}
			sb.WriteString(s)
		case 'j':
			num(t.YearDay(), 3)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'p':
			if t.Hour() < 12 {
				sb.WriteString("AM")
			} else {
				sb.WriteString("PM")
			}
		case 'B':
			sb.WriteString(t.Month().String())
		case 'b', 'h':
			sb.WriteString(t.Month().String()[:3])
		case 'A':
			sb.WriteString(t.Weekday().String())
		case 'a':
			sb.WriteString(t.Weekday().String()[:3])
		case 'w':
			sb.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'Z':
			name, _ := t.Zone()
			sb.WriteString(name)
		case 'z':
			sb.WriteString(t.Format("-0700"))
		case '%':
			sb.WriteByte('%')
		default:
			// Python (through the C library) leaves an unknown directive as written.
			sb.WriteByte('%')
			if !pad {
				sb.WriteByte('-')
			}
			sb.WriteByte(format[i])
		}
	}
	return sb.String()
}

// keywordDict is dict(a=x, b=y) and namespace(a=x, b=y), rewritten by New as
// __tandem_dict("a", x, "b", y) so that the keys keep their order (the library's
// own build the dict from a Go map).
func keywordDict(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	d := jinja.NewDict()
	for i := 0; i+1 < len(args); i += 2 {
		d.AsDict().Set(text(args[i]), args[i+1])
	}
	return d, nil
}

// The bounds of one render (see the package documentation).
const (
	maxSteps      = 1 << 18
	maxMacroDepth = 64
	// Real templates render in tens of microseconds; the time bound is for a
	// template whose every step is slow (a string grown by a megabyte a loop
	// iteration), and is far enough that a loaded machine (this one ran at a load
	// of 23 on 2 cores, and a 1 s bound failed renders under -race) never trips it.
	maxRenderTime = 10 * time.Second
	// The library parses and evaluates recursively; these keep its stack small.
	maxSourceLen = 256 << 10
	maxNesting   = 128
)

// budget counts one render's work. A render runs on one goroutine, so the
// callables that share it need no locking.
type budget struct {
	steps    int
	depth    int
	deadline time.Time
}

func newBudget(start time.Time) *budget {
	return &budget{deadline: start.Add(maxRenderTime)}
}

func (b *budget) spend(n int) error {
	b.steps += n
	if b.steps > maxSteps {
		return fmt.Errorf("%w: more than %d loop iterations and macro calls", ErrLimit, maxSteps)
	}
	if time.Now().After(b.deadline) {
		return fmt.Errorf("%w: rendering took longer than %v", ErrLimit, maxRenderTime)
	}
	return nil
}

// step is called at the top of every loop body.
func (b *budget) step([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return jinja.NewString(""), b.spend(1)
}

// enter is called at the top of every macro body, leave at its end. A macro body
// that fails ends the whole render, so a missed leave does not matter.
func (b *budget) enter([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	b.depth++
	if b.depth > maxMacroDepth {
		return jinja.Undefined(), fmt.Errorf("%w: macros nested more than %d deep (a macro that calls itself without end?)", ErrLimit, maxMacroDepth)
	}
	return jinja.NewString(""), b.spend(1)
}

func (b *budget) leave([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	b.depth--
	return jinja.NewString(""), nil
}

// assigned checks the value a `set` just stored: assigned(value) after `set name
// = value`, assigned(ns, "attr") after `set ns.attr = value`. The library prints,
// compares and serializes values by recursion over every path, so a value that
// contains itself (possible only through ns.attr, see mutators) overflows the Go
// stack, a fatal error no recover catches; one nested a hundred thousand deep by a
// loop takes minutes to print, in time quadratic in its depth; and one built by
// `set ns.x = [ns.x, ns.x]` in a loop is small in memory but 2^n long printed.
// All three are refused; the lists and dicts walked count against the budget.
func (b *budget) assigned(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var ns *jinja.Dict
	v := jinja.Undefined()
	switch {
	case len(args) == 1:
		v = args[0]
	case len(args) == 2 && args[0].IsDict() && args[1].IsString():
		ns = args[0].AsDict()
		v, _ = ns.Get(args[1].AsString())
	}
	type shape struct{ depth, size int } // below a list or dict; size as printed
	seen := map[any]shape{}
	var walk func(v jinja.Value, level int) (shape, error)
	walk = func(v jinja.Value, level int) (shape, error) {
		var key any
		var items []jinja.Value
		switch {
		case v.IsDict():
			d := v.AsDict()
			if d == ns {
				return shape{}, errors.New("chattemplate: the template put a namespace inside itself")
			}
			key = d
			for _, k := range d.Keys {
				items = append(items, d.Data[k])
			}
		case v.IsList():
			key, items = v.AsList(), v.AsList().Items
		default:
			return shape{}, nil
		}
		sh, ok := seen[key]
		if !ok {
			if level > maxNesting {
				return shape{}, fmt.Errorf("%w: a value nested more than %d deep", ErrLimit, maxNesting)
			}
			sh.size = 1
			for _, x := range items {
				c, err := walk(x, level+1)
				if err != nil {
					return shape{}, err
				}
				sh.depth = max(sh.depth, c.depth+1)
				sh.size = min(sh.size+c.size, maxSteps+1)
			}
			seen[key] = sh
		}
		switch {
		case level+sh.depth > maxNesting:
			return shape{}, fmt.Errorf("%w: a value nested more than %d deep", ErrLimit, maxNesting)
		case sh.size > maxSteps:
			return shape{}, fmt.Errorf("%w: a value of more than %d lists and dicts once printed", ErrLimit, maxSteps)
		}
		return sh, nil
	}
	if _, err := walk(v, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(""), b.spend(len(seen))
}

// rangeFunc replaces the library's range, whose loop overflows int64 and then
// never ends (range(0, 2**63-1, 2**62)) and which builds any length asked for.
// Its items count against the render's budget before they are built.
func (b *budget) rangeFunc(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var start, stop, step int64 = 0, 0, 1
	ints := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			ints[i] = a.AsInt()
		case a.IsBool():
			if a.AsBool() {
				ints[i] = 1
			}
		default:
			return jinja.Undefined(), fmt.Errorf("range: argument %d is %s, not an integer", i+1, a.String())
		}
	}
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), fmt.Errorf("range: step must not be zero")
	}
	n := rangeLen(start, stop, step)
	if n > maxSteps {
		return jinja.Undefined(), fmt.Errorf("%w: range of %d items", ErrLimit, n)
	}
	if err := b.spend(int(n)); err != nil {
		return jinja.Undefined(), err
	}
	items := make([]jinja.Value, int(n))
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

// rangeLen is the number of items of range(start, stop, step), computed in uint64
// so that no difference of two int64 overflows.
func rangeLen(start, stop, step int64) uint64 {
	var span, stride uint64
	if step > 0 {
		if start >= stop {
			return 0
		}
		span, stride = uint64(stop)-uint64(start), uint64(step)
	} else {
		if start <= stop {
			return 0
		}
		span, stride = uint64(start)-uint64(stop), uint64(-(step+1))+1
	}
	n := span / stride
	if span%stride != 0 {
		n++
	}
	return n
}
