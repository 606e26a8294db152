package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Writer writes GGUF files: the metadata-only files a worker hands its tokenizer
// in (MetadataOnly), the vocabulary-only files a tokenizer is marshalled into
// (tokenizer.Spec.MarshalGGUF), and the small models of every tensor type and
// architecture that tests and benchmarks build instead of shipping large files.
// It collects metadata and tensors, then encodes them.
type Writer struct {
	Version   uint32 // 3 unless set
	Alignment int    // written as general.alignment when not 0 or 32
	kv        []pair
	tensors   []tensor
}

type pair struct {
	key string
	val any
}

type tensor struct {
	name string
	typ  Type
	dims []uint64
	data []byte
}

// Set adds a metadata value. The Go type chooses the GGUF type: uint8..uint64,
// int8..int64, float32, float64, bool, string, and slices of those; a Value read
// from a file keeps its own.
func (f *Writer) Set(key string, v any) *Writer {
	f.kv = append(f.kv, pair{key, v})
	return f
}

// Tensor adds a tensor. dims are ggml's ne, innermost first; data must be its bytes.
func (f *Writer) Tensor(name string, typ Type, dims []uint64, data []byte) *Writer {
	f.tensors = append(f.tensors, tensor{name, typ, dims, data})
	return f
}

// F32 adds an F32 tensor from values.
func (f *Writer) F32(name string, dims []uint64, vals []float32) *Writer {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return f.Tensor(name, TypeF32, dims, b)
}

// Bytes encodes the file.
func (f *Writer) Bytes() ([]byte, error) {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { le(uint64(len(s))); b.WriteString(s) }
	version := f.Version
	if version == 0 {
		version = 3
	}
	align := f.Alignment
	if align == 0 {
		align = DefaultAlignment
	}
	kv := f.kv
	if align != DefaultAlignment {
		kv = append([]pair{{"general.alignment", uint32(align)}}, kv...)
	}
	b.WriteString(Magic)
	le(version)
	le(uint64(len(f.tensors)))
	le(uint64(len(kv)))
	for _, p := range kv {
		str(p.key)
		if err := writeValue(&b, p.val); err != nil {
			return nil, fmt.Errorf("gguf: writing %s: %w", p.key, err)
		}
	}
	var off uint64
	offsets := make([]uint64, len(f.tensors))
	for i, t := range f.tensors {
		str(t.name)
		le(uint32(len(t.dims)))
		for _, d := range t.dims {
			le(d)
		}
		le(uint32(t.typ))
		offsets[i] = off
		le(off)
		off += uint64(len(t.data))
		off = (off + uint64(align) - 1) / uint64(align) * uint64(align)
	}
	pad := func() {
		// A file of metadata alone ends with its last key: nothing is aligned after it.
		for len(f.tensors) > 0 && b.Len()%align != 0 {
			b.WriteByte(0)
		}
	}
	pad()
	for _, t := range f.tensors {
		b.Write(t.data)
		pad()
	}
	return b.Bytes(), nil
}

func writeValue(b *bytes.Buffer, v any) error {
	le := func(v any) { _ = binary.Write(b, binary.LittleEndian, v) }
	if val, ok := v.(Value); ok {
		le(uint32(val.Type))
		encodeValue(b, val)
		return nil
	}
	typ, ok := valueType(v)
	if !ok {
		return fmt.Errorf("unsupported value type %T", v)
	}
	le(uint32(typ))
	switch x := v.(type) {
	case string:
		le(uint64(len(x)))
		b.WriteString(x)
	case bool:
		le(x)
	case []string:
		le(uint32(ValueString))
		le(uint64(len(x)))
		for _, s := range x {
			le(uint64(len(s)))
			b.WriteString(s)
		}
	case []bool, []uint8, []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64, []float32, []float64:
		elem, _ := valueType(elemZero(x))
		le(uint32(elem))
		le(uint64(sliceLen(x)))
		le(x)
	default:
		le(x)
	}
	return nil
}

func valueType(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return ValueUint8, true
	case int8:
		return ValueInt8, true
	case uint16:
		return ValueUint16, true
	case int16:
		return ValueInt16, true
	case uint32:
		return ValueUint32, true
	case int32:
		return ValueInt32, true
	case uint64:
		return ValueUint64, true
	case int64:
		return ValueInt64, true
	case float32:
		return ValueFloat32, true
	case float64:
		return ValueFloat64, true
	case bool:
		return ValueBool, true
	case string:
		return ValueString, true
	case []string, []bool, []uint8, []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64, []float32, []float64:
		return ValueArray, true
	}
	return 0, false
}

func elemZero(v any) any {
	switch v.(type) {
	case []bool:
		return false
	case []uint8:
		return uint8(0)
	case []int8:
		return int8(0)
	case []uint16:
		return uint16(0)
	case []int16:
		return int16(0)
	case []uint32:
		return uint32(0)
	case []int32:
		return int32(0)
	case []uint64:
		return uint64(0)
	case []int64:
		return int64(0)
	case []float32:
		return float32(0)
	}
	return float64(0)
}

func sliceLen(v any) int {
	return binary.Size(v) / binary.Size(elemZero(v))
}
