package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
)

// MetadataOnly encodes a GGUF file with the metadata keys keep accepts and no
// tensors: how a worker hands its tokenizer (the tokenizer.* keys, a few MB at most)
// to a frontend that has no access to the model file.
func (f *File) MetadataOnly(keep func(key string) bool) []byte {
	var w Writer
	for _, k := range f.keys {
		if keep(k) && k != "general.alignment" {
			w.Set(k, f.kv[k])
		}
	}
	b, _ := w.Bytes() // a Value always encodes
	return b
}

func encodeValue(b *bytes.Buffer, v Value) {
	le := func(x any) { _ = binary.Write(b, binary.LittleEndian, x) }
	switch v.Type {
	case ValueUint8, ValueBool:
		if v.Type == ValueBool && v.b {
			b.WriteByte(1)
		} else {
			b.WriteByte(byte(v.u))
		}
	case ValueInt8:
		b.WriteByte(byte(int8(v.i)))
	case ValueUint16:
		le(uint16(v.u))
	case ValueInt16:
		le(int16(v.i))
	case ValueUint32:
		le(uint32(v.u))
	case ValueInt32:
		le(int32(v.i))
	case ValueUint64:
		le(v.u)
	case ValueInt64:
		le(v.i)
	case ValueFloat32:
		le(math.Float32bits(float32(v.f)))
	case ValueFloat64:
		le(math.Float64bits(v.f))
	case ValueString:
		le(uint64(len(v.s)))
		b.WriteString(v.s)
	case ValueArray:
		le(uint32(v.Elem))
		le(uint64(v.n))
		switch {
		case v.raw != nil || v.Elem.size() > 0:
			b.Write(v.raw)
		case v.strs != nil || v.Elem == ValueString:
			for _, s := range v.strs {
				le(uint64(len(s)))
				b.WriteString(s)
			}
		default:
			for _, e := range v.arr {
				encodeValue(b, e)
			}
		}
	}
}
