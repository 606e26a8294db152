package gguf

import (
	"fmt"
	"math"
	"slices"
)

// Value is one metadata value: a scalar, a string, or an array of values of one type.
type Value struct {
	Type ValueType
	Elem ValueType // element type of an array
	u    uint64
	i    int64
	f    float64
	b    bool
	s    string
	// An array holds its elements in one of these, by element type.
	n    int
	raw  []byte // fixed-size numbers, little-endian, a view of the file
	strs []string
	arr  []Value
}

// Len is an array's length (0 for a scalar).
func (v Value) Len() int { return v.n }

// elem decodes element i of an array of fixed-size scalars.
func (v Value) elem(i int) Value {
	sz := v.Elem.size()
	r := reader{buf: v.raw[i*sz : (i+1)*sz]}
	return r.value(v.Elem, 0)
}

func (v Value) String() string {
	switch v.Type {
	case ValueUint8, ValueUint16, ValueUint32, ValueUint64:
		return fmt.Sprint(v.u)
	case ValueInt8, ValueInt16, ValueInt32, ValueInt64:
		return fmt.Sprint(v.i)
	case ValueFloat32, ValueFloat64:
		return fmt.Sprint(v.f)
	case ValueBool:
		return fmt.Sprint(v.b)
	case ValueString:
		return fmt.Sprintf("%q", v.s)
	case ValueArray:
		return fmt.Sprintf("[%d %s]", v.n, v.Elem)
	}
	return "?"
}

func (v Value) isUint() bool {
	return v.Type == ValueUint8 || v.Type == ValueUint16 || v.Type == ValueUint32 || v.Type == ValueUint64
}

func (v Value) isInt() bool {
	return v.Type == ValueInt8 || v.Type == ValueInt16 || v.Type == ValueInt32 || v.Type == ValueInt64
}

// asUint is v as a non-negative integer, whichever integer type the writer chose
// (converters disagree: token ids appear as uint32 and as int32).
func (v Value) asUint() (uint64, bool) {
	switch {
	case v.isUint():
		return v.u, true
	case v.isInt() && v.i >= 0:
		return uint64(v.i), true
	}
	return 0, false
}

func (v Value) asInt() (int64, bool) {
	switch {
	case v.isInt():
		return v.i, true
	case v.isUint() && v.u <= math.MaxInt64:
		return int64(v.u), true
	}
	return 0, false
}

func (v Value) asFloat() (float64, bool) {
	switch {
	case v.Type == ValueFloat32 || v.Type == ValueFloat64:
		return v.f, true
	case v.isInt():
		return float64(v.i), true
	case v.isUint():
		return float64(v.u), true
	}
	return 0, false
}

func (f *File) lookup(key string) (Value, error) {
	v, ok := f.kv[key]
	if !ok {
		return v, fmt.Errorf("%w: %s", ErrMissing, key)
	}
	return v, nil
}

func wrongType(key string, v Value, want string) error {
	return fmt.Errorf("gguf: metadata %s is %s %s, want %s", key, v.Type, v, want)
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return "", err
	}
	if v.Type != ValueString {
		return "", wrongType(key, v, "a string")
	}
	return v.s, nil
}

// Uint returns a non-negative integer value of any integer type.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	u, ok := v.asUint()
	if !ok {
		return 0, wrongType(key, v, "a non-negative integer")
	}
	return u, nil
}

// Int returns an integer value of any integer type.
func (f *File) Int(key string) (int64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.asInt()
	if !ok {
		return 0, wrongType(key, v, "an integer")
	}
	return i, nil
}

// Float returns a number value; integers are converted.
func (f *File) Float(key string) (float64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	x, ok := v.asFloat()
	if !ok {
		return 0, wrongType(key, v, "a number")
	}
	return x, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.lookup(key)
	if err != nil {
		return false, err
	}
	if v.Type != ValueBool {
		return false, wrongType(key, v, "a bool")
	}
	return v.b, nil
}

func (f *File) array(key string, elem string, ok func(ValueType) bool) (Value, error) {
	v, err := f.lookup(key)
	if err != nil {
		return v, err
	}
	if v.Type != ValueArray || (v.n > 0 && !ok(v.Elem)) {
		return v, wrongType(key, v, "an array of "+elem)
	}
	return v, nil
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.array(key, "strings", func(t ValueType) bool { return t == ValueString })
	if err != nil {
		return nil, err
	}
	return slices.Clone(v.strs), nil
}

func isNumber(t ValueType) bool { return t.size() > 0 && t != ValueBool }

// Float32s returns an array of numbers as float32.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.array(key, "numbers", isNumber)
	if err != nil {
		return nil, err
	}
	out := make([]float32, v.n)
	for i := range out {
		x, _ := v.elem(i).asFloat()
		out[i] = float32(x)
	}
	return out, nil
}

// Int32s returns an array of integers that fit in int32.
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.array(key, "integers", func(t ValueType) bool { return isNumber(t) && t != ValueFloat32 && t != ValueFloat64 })
	if err != nil {
		return nil, err
	}
	out := make([]int32, v.n)
	for i := range out {
		e := v.elem(i)
		x, ok := e.asInt()
		if !ok || x < math.MinInt32 || x > math.MaxInt32 {
			return nil, fmt.Errorf("gguf: metadata %s[%d] = %s does not fit in int32", key, i, e)
		}
		out[i] = int32(x)
	}
	return out, nil
}
