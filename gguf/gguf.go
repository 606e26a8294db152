// Package gguf reads GGUF files, the model format of llama.cpp: a header, typed
// metadata (architecture, hyperparameters, tokenizer) and tensors whose data follows
// at aligned offsets.
//
// Open memory-maps the file, so tensor data is never copied at load: a tensor's Data
// is a view of the mapping, and pages come in from the page cache as they are read.
// Every count, length and offset in the file is checked against the file's size
// before it is used, so a truncated or hostile file is an error, never a panic or a
// huge allocation.
//
// The format is small, so tandem reads it itself rather than through
// github.com/gpustack/gguf-parser-go: that library is built for estimating memory
// from remote files (it brings HTTP, Ollama and Hugging Face clients) and reads
// tensor data through its own file handle, while the engine needs a view of the
// mapping and nothing else.
package gguf

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// Magic is the file's first four bytes.
const Magic = "GGUF"

// DefaultAlignment is the alignment of tensor data when general.alignment is absent.
const DefaultAlignment = 32

// ErrMissing is wrapped by the accessors' error when a key is absent.
var ErrMissing = errors.New("gguf: key not present")

// File is a parsed GGUF file. Its tensors' Data are views of the file's bytes; they
// must not be used after Close.
type File struct {
	version   uint32
	kv        map[string]Value
	keys      []string // in file order
	tensors   []TensorInfo
	byName    map[string]int
	alignment int
	dataStart int
	data      []byte
	unmap     func() error
}

// TensorInfo describes one tensor.
type TensorInfo struct {
	Name string
	Type Type
	// Dims are ggml's ne: Dims[0] is the innermost (contiguous) dimension. A weight
	// matrix of a linear layer with K inputs and N outputs has Dims {K, N}: N rows of
	// K values.
	Dims []uint64
	// Offset is relative to the start of the data section.
	Offset uint64
	// Data is the tensor's bytes, a view of the file.
	Data []byte
}

// Elems is the number of values in the tensor.
func (t TensorInfo) Elems() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Open memory-maps and parses the file at path.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.Size() < 24 {
		return nil, fmt.Errorf("gguf: %s: %d bytes is too short for a GGUF header", path, st.Size())
	}
	data, unmap, err := mapFile(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: map %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = unmap()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	f.unmap = unmap
	return f, nil
}

// Parse parses a GGUF file held in memory. The File keeps data; it must not change.
func Parse(data []byte) (*File, error) {
	r := &reader{buf: data}
	magic := r.bytes(4)
	if r.err != nil || string(magic) != Magic {
		return nil, fmt.Errorf("gguf: not a GGUF file (magic %q, want %q)", magic, Magic)
	}
	f := &File{version: r.u32(), kv: map[string]Value{}, byName: map[string]int{}, data: data}
	if r.err == nil && f.version != 2 && f.version != 3 {
		if f.version == 1 {
			return nil, errors.New("gguf: version 1 files are not supported (convert with a newer llama.cpp)")
		}
		return nil, fmt.Errorf("gguf: unsupported version %d (want 2 or 3; a big-endian file reads as a huge version)", f.version)
	}
	nTensors, nKV := r.u64(), r.u64()
	if r.err != nil {
		return nil, r.err
	}
	// Each key-value pair takes at least 12 bytes and each tensor info at least 24, so
	// counts beyond what the file can hold are rejected before any allocation.
	if nKV > uint64(len(data))/12 || nTensors > uint64(len(data))/24 {
		return nil, fmt.Errorf("gguf: header claims %d metadata keys and %d tensors, more than %d bytes can hold",
			nKV, nTensors, len(data))
	}
	for range nKV {
		key := r.str()
		if r.err != nil {
			return nil, fmt.Errorf("gguf: metadata key %d: %w", len(f.keys), r.err)
		}
		v := r.value(ValueType(r.u32()), 0)
		if r.err != nil {
			return nil, fmt.Errorf("gguf: metadata %q: %w", key, r.err)
		}
		if _, dup := f.kv[key]; dup {
			return nil, fmt.Errorf("gguf: metadata key %q appears twice", key)
		}
		f.kv[key] = v
		f.keys = append(f.keys, key)
	}
	f.alignment = DefaultAlignment
	if _, ok := f.kv["general.alignment"]; ok {
		a, err := f.Uint("general.alignment")
		if err != nil || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return nil, fmt.Errorf("gguf: general.alignment must be a power of two up to 65536, got %v", f.kv["general.alignment"])
		}
		f.alignment = int(a)
	}
	for i := range nTensors {
		t, err := r.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d: %w", i, err)
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("gguf: tensor %q appears twice", t.Name)
		}
		f.byName[t.Name] = len(f.tensors)
		f.tensors = append(f.tensors, t)
	}
	f.dataStart = alignUp(r.off, f.alignment)
	for i := range f.tensors {
		if err := f.bind(&f.tensors[i]); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// bind checks a tensor's size and bounds and points its Data into the file.
func (f *File) bind(t *TensorInfo) error {
	if !t.Type.Known() {
		return fmt.Errorf("gguf: tensor %q has unknown type %d", t.Name, uint32(t.Type))
	}
	if t.Offset%uint64(f.alignment) != 0 {
		return fmt.Errorf("gguf: tensor %q offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.alignment)
	}
	rowBytes, err := t.Type.RowBytes(int(t.Dims[0]))
	if err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	size := uint64(rowBytes)
	for _, d := range t.Dims[1:] {
		if d != 0 && size > uint64(len(f.data))/d {
			return fmt.Errorf("gguf: tensor %q of %v %s is larger than the file", t.Name, t.Dims, t.Type)
		}
		size *= d
	}
	start := uint64(f.dataStart) + t.Offset
	if t.Offset > uint64(len(f.data)) || start > uint64(len(f.data)) || size > uint64(len(f.data))-start {
		return fmt.Errorf("gguf: tensor %q (%d bytes at offset %d) runs past the end of the file (%d bytes); truncated?",
			t.Name, size, start, len(f.data))
	}
	t.Data = f.data[start : start+size : start+size]
	return nil
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// DontNeed says that t's bytes will not be read again soon, because the caller keeps
// its own copy (the f32 engine packs F32 weights into its own layout): the mapped
// pages leave the process's resident memory, staying in the page cache, and are read
// back if touched again. It does nothing to a file parsed from memory.
func (f *File) DontNeed(t TensorInfo) {
	if f.unmap != nil && len(t.Data) > 0 {
		dontNeed(t.Data)
	}
}

// Close unmaps the file. Tensor data must not be used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	return err
}

// Version is the format version, 2 or 3.
func (f *File) Version() uint32 { return f.version }

// Alignment is the alignment of tensor data in bytes.
func (f *File) Alignment() int { return f.alignment }

// Keys lists the metadata keys in file order.
func (f *File) Keys() []string { return slices.Clone(f.keys) }

// Value returns a metadata value.
func (f *File) Value(key string) (Value, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// Tensors lists the tensors in file order.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Tensor returns the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}
