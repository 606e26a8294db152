package doccheck

import (
	"fmt"
	"strings"
)

// Command is one simple command of a shell block: its words, quotes removed,
// and the line it starts on.
type Command struct {
	Line  int
	Words []string
}

// SplitShell splits a sh block into simple commands the way a POSIX shell
// would for the parts docs use: words separated by blanks, '...' and "..."
// quoting (a backslash escapes in double quotes and outside quotes), a
// backslash-newline joins lines, # starts a comment at the start of a word, and
// a newline or an unquoted ; & | < > ends a command. It refuses what it would
// get wrong rather than guess: an unterminated quote.
func SplitShell(text string, firstLine int) ([]Command, error) {
	var (
		cmds    []Command
		words   []string
		word    strings.Builder
		inWord  bool
		line    = firstLine
		start   = firstLine
		rs      = []rune(text)
		endWord = func() {
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		}
		endCmd = func() {
			endWord()
			if len(words) > 0 {
				cmds = append(cmds, Command{Line: start, Words: words})
			}
			words = nil
		}
	)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		if len(words) == 0 && !inWord {
			start = line
		}
		switch {
		case r == '\\' && i+1 < len(rs):
			i++
			if rs[i] == '\n' {
				line++
				continue
			}
			word.WriteRune(rs[i])
			inWord = true
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("line %d: unterminated '", line)
			}
			seg := string(rs[i+1 : j])
			line += strings.Count(seg, "\n")
			word.WriteString(seg)
			inWord, i = true, j
		case r == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\\\"$`", rs[j+1]) {
					j++
				} else if rs[j] == '\n' {
					line++
				}
				word.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, fmt.Errorf("line %d: unterminated \"", line)
			}
			inWord, i = true, j
		case r == '#' && !inWord:
			for i+1 < len(rs) && rs[i+1] != '\n' {
				i++
			}
		case r == '\n':
			endCmd()
			line++
		case strings.ContainsRune(";&|<>", r):
			endCmd()
		case r == ' ' || r == '\t':
			endWord()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	return cmds, nil
}

// TandemArgs returns the arguments of a command that runs tandem (tandem,
// bin/tandem or any path ending in /tandem, or go run ./cmd/tandem), after
// the prefixes docs put before a command: VAR=value, env, time, nice -n N,
// flock FILE and taskset -c CPUS. ok is false for any other command.
func TandemArgs(words []string) (args []string, ok bool) {
	i := 0
	for i < len(words) {
		w := words[i]
		switch {
		case strings.Contains(w, "=") && !strings.HasPrefix(w, "-") && !strings.Contains(strings.SplitN(w, "=", 2)[0], "/"):
			i++
		case w == "env" || w == "time":
			i++
		case w == "nice" && i+2 < len(words) && words[i+1] == "-n":
			i += 3
		case w == "flock" && i+1 < len(words):
			i += 2
		case w == "taskset" && i+2 < len(words) && words[i+1] == "-c":
			i += 3
		default:
			if w == "tandem" || strings.HasSuffix(w, "/tandem") {
				return words[i+1:], true
			}
			if w == "go" && i+2 < len(words) && words[i+1] == "run" && strings.TrimSuffix(words[i+2], "/") == "./cmd/tandem" {
				return words[i+3:], true
			}
			return nil, false
		}
	}
	return nil, false
}
