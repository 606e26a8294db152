//go:build unix

package gguf

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapFile maps the file read-only and shared, so its pages are the page cache's:
// several workers serving one file share them, and untouched tensors cost nothing.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	data, err := unix.Mmap(int(fh.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return unix.Munmap(data) }, nil
}

// dontNeed drops the whole pages inside b, a part of a mapping, from the process's
// resident set; they stay in the page cache.
func dontNeed(b []byte) {
	if len(b) == 0 {
		return
	}
	ps := uintptr(unix.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo, hi := (start+ps-1)&^(ps-1), (start+uintptr(len(b)))&^(ps-1)
	if hi > lo {
		_ = unix.Madvise(b[lo-start:hi-start], unix.MADV_DONTNEED)
	}
}
