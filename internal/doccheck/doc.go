// Package doccheck holds the test that keeps the repository's Markdown working
// from a fresh clone: every relative link resolves to a file here (and to a
// heading, when it names one), no document points outside the repository, and
// every tandem command in a fenced sh block parses its flags. It has no code of
// its own; the test is the package.
package doccheck
