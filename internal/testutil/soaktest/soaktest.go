// Package soaktest holds what the soak tests share: their knobs from the
// environment and the tally of their outcomes.
package soaktest

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"
)

// Duration is the positive duration in the environment variable name, or def.
func Duration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration", name, s)
	}
	return d
}

// Count is the positive number in the environment variable name, or def.
func Count(tb testing.TB, name string, def int) int {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// Trim drops request-specific numbers from an error, so that like errors count
// together.
func Trim(s string) string { return digits.ReplaceAllString(s, "N") }

var digits = regexp.MustCompile(`[0-9]+`)

// Tally sums the outcomes and the errors by kind and lists them one a line,
// errors marked, in order.
func Tally(outcomes, errs map[string]int) (lines []string, total, failed int) {
	for k, v := range outcomes {
		total += v
		lines = append(lines, fmt.Sprintf("  %6d  %s", v, k))
	}
	for k, v := range errs {
		total += v
		failed += v
		lines = append(lines, fmt.Sprintf("  %6d  ERROR %s", v, k))
	}
	sort.Strings(lines)
	return lines, total, failed
}
