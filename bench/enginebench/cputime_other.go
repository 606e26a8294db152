//go:build !unix

package enginebench

import "time"

// cpuTime is unknown here: the cpu column then reads 0.
func cpuTime() time.Duration { return 0 }
