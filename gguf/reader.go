package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

var errShort = errors.New("unexpected end of file")

// reader decodes little-endian values from buf. After the first error every read
// returns zero values, so a parse can check err once per item.
type reader struct {
	buf []byte
	off int
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.buf)-r.off {
		r.err = errShort
		return nil
	}
	b := r.buf[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8() uint8 {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *reader) u32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *reader) str() string {
	n := r.u64()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.buf)-r.off) {
		r.err = fmt.Errorf("string of %d bytes runs past the end of the file", n)
		return ""
	}
	return string(r.bytes(int(n)))
}

// maxArrayDepth bounds arrays of arrays; no model uses more than one level.
const maxArrayDepth = 4

func (r *reader) value(t ValueType, depth int) Value {
	v := Value{Type: t}
	switch t {
	case ValueUint8:
		v.u = uint64(r.u8())
	case ValueInt8:
		v.i = int64(int8(r.u8()))
	case ValueUint16:
		v.u = uint64(r.u16())
	case ValueInt16:
		v.i = int64(int16(r.u16()))
	case ValueUint32:
		v.u = uint64(r.u32())
	case ValueInt32:
		v.i = int64(int32(r.u32()))
	case ValueUint64:
		v.u = r.u64()
	case ValueInt64:
		v.i = int64(r.u64())
	case ValueFloat32:
		v.f = float64(math.Float32frombits(r.u32()))
	case ValueFloat64:
		v.f = math.Float64frombits(r.u64())
	case ValueBool:
		b := r.u8()
		if r.err == nil && b > 1 {
			r.err = fmt.Errorf("bool value %d is neither 0 nor 1", b)
		}
		v.b = b == 1
	case ValueString:
		v.s = r.str()
	case ValueArray:
		if depth >= maxArrayDepth {
			r.err = fmt.Errorf("arrays nested more than %d deep", maxArrayDepth)
			return v
		}
		v.Elem = ValueType(r.u32())
		n := r.u64()
		if r.err != nil {
			return v
		}
		// Every element takes at least one byte (strings eight), so a count the rest
		// of the file cannot hold is refused before allocating for it.
		minSize := uint64(max(v.Elem.size(), 1))
		if v.Elem == ValueString || v.Elem == ValueArray {
			minSize = 8
		}
		if n > uint64(len(r.buf)-r.off)/minSize {
			r.err = fmt.Errorf("array of %d %s runs past the end of the file", n, v.Elem)
			return v
		}
		v.n = int(n)
		switch {
		case v.Elem.size() > 0:
			// Numbers stay as a view of the file; accessors decode them. A vocabulary's
			// 150k scores would otherwise cost a Value each.
			v.raw = r.bytes(int(n) * v.Elem.size())
		case v.Elem == ValueString:
			v.strs = make([]string, 0, n)
			for range n {
				v.strs = append(v.strs, r.str())
				if r.err != nil {
					return v
				}
			}
		default:
			v.arr = make([]Value, 0, n)
			for range n {
				e := r.value(v.Elem, depth+1)
				if r.err != nil {
					return v
				}
				v.arr = append(v.arr, e)
			}
		}
	default:
		r.err = fmt.Errorf("unknown value type %d", uint32(t))
	}
	return v
}

// maxDims is GGML_MAX_DIMS.
const maxDims = 4

func (r *reader) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	t.Name = r.str()
	nd := r.u32()
	if r.err != nil {
		return t, r.err
	}
	if nd == 0 || nd > maxDims {
		return t, fmt.Errorf("%q has %d dimensions (want 1 to %d)", t.Name, nd, maxDims)
	}
	t.Dims = make([]uint64, nd)
	for i := range t.Dims {
		t.Dims[i] = r.u64()
		if r.err == nil && (t.Dims[i] == 0 || t.Dims[i] > 1<<40) {
			return t, fmt.Errorf("%q has dimension %d of size %d", t.Name, i, t.Dims[i])
		}
	}
	t.Type = Type(r.u32())
	t.Offset = r.u64()
	if r.err != nil {
		return t, fmt.Errorf("%q: %w", t.Name, r.err)
	}
	return t, nil
}
