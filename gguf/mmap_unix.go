//go:build unix

package gguf

import (
	"os"

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
