//go:build !unix

package gguf

import (
	"io"
	"os"
)

// mapFile reads the whole file where memory mapping is not available.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}

// dontNeed has nothing to drop: the file was read, not mapped.
func dontNeed([]byte) {}
