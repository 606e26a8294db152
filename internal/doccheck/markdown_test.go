package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// A Block is a fenced code block: its info string and its text.
type Block struct {
	Lang string
	Line int // the line of its first text line, from 1
	Text string
}

// Doc is a Markdown file split into the prose it links from, its fenced
// blocks and its headings' anchors.
type Doc struct {
	Prose   []ProseLine
	Blocks  []Block
	Anchors map[string]bool
}

// ProseLine is a line outside fenced blocks, inline code removed.
type ProseLine struct {
	Line int
	Text string
}

var (
	fence      = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// Link matches an inline link or image and captures its destination.
	Link = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
)

// Parse splits a Markdown file.
func Parse(text string) Doc {
	d := Doc{Anchors: map[string]bool{}}
	seen := map[string]int{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if m := fence.FindStringSubmatch(lines[i]); m != nil {
			start, body := i+2, []string{}
			for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), m[1]); i++ {
				body = append(body, lines[i])
			}
			d.Blocks = append(d.Blocks, Block{Lang: m[2], Line: start, Text: strings.Join(body, "\n")})
			continue
		}
		line := inlineCode.ReplaceAllStringFunc(lines[i], func(s string) string {
			return strings.Repeat(" ", len(s))
		})
		d.Prose = append(d.Prose, ProseLine{Line: i + 1, Text: line})
		if m := heading.FindStringSubmatch(lines[i]); m != nil {
			a := Slug(m[1])
			if n := seen[a]; n > 0 {
				d.Anchors[a+"-"+strconv.Itoa(n)] = true
			} else {
				d.Anchors[a] = true
			}
			seen[a]++
		}
	}
	return d
}

// Slug is the anchor GitHub gives a heading: the text of its links, lower case,
// only letters, digits, spaces, hyphens and underscores kept, spaces as hyphens.
func Slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
