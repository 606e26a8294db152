package doccheck

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// root is the repository's root: the nearest directory above this one with a
// go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// docs returns the repository's Markdown files, relative to root: README.md,
// DEVELOPERS.md, docs/ and every other one outside .git and testdata.
func docs(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"README.md", "DEVELOPERS.md", "docs/BENCHMARKS.md"} {
		found := false
		for _, f := range files {
			found = found || f == must
		}
		if !found {
			t.Fatalf("%s not found under %s", must, root)
		}
	}
	return files
}

func read(t *testing.T, root, rel string) Doc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return Parse(string(b))
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// TestLinksResolve checks that every relative link in the docs names a file or
// directory in the repository, and a heading of it when it has an anchor.
func TestLinksResolve(t *testing.T) {
	root := root(t)
	parsed := map[string]Doc{}
	doc := func(rel string) Doc {
		if d, ok := parsed[rel]; ok {
			return d
		}
		parsed[rel] = read(t, root, rel)
		return parsed[rel]
	}
	links := 0
	for _, f := range docs(t, root) {
		for _, pl := range doc(f).Prose {
			for _, m := range Link.FindAllStringSubmatch(pl.Text, -1) {
				dest := m[1]
				if scheme.MatchString(dest) {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(dest, "#")
				target := f
				if path != "" {
					target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), path)))
					if target == ".." || strings.HasPrefix(target, "../") || filepath.IsAbs(path) {
						t.Errorf("%s:%d: link %q leaves the repository", f, pl.Line, dest)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, target)); err != nil {
						t.Errorf("%s:%d: link %q: no file %s in the repository", f, pl.Line, dest, target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(target, ".md") && !doc(target).Anchors[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", f, pl.Line, dest, target, anchor)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative link found: the link pattern no longer matches the docs")
	}
}

// TestNoPathsOutsideTheRepository checks that no doc names a path that exists
// only beside a clone or on one machine.
func TestNoPathsOutsideTheRepository(t *testing.T) {
	root := root(t)
	// Spelt in pieces so that this file does not match itself if it is ever
	// scanned.
	forbidden := []string{".." + "/shared", "/" + "work/"}
	for _, f := range docs(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, bad := range forbidden {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d: names %q, which a clone does not have: %s", f, i+1, bad, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestDocumentedCommandsParse builds cmd/tandem and, for every tandem command
// in a fenced sh block, checks its flags against the command's own: each flag
// must be one the command defines (from its --help), and the built binary must
// accept the documented flags and values when --help follows the last of them,
// which stops it before it does anything.
func TestDocumentedCommandsParse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/tandem")
	}
	root := root(t)
	bin := filepath.Join(t.TempDir(), "tandem")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tandem")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tandem: %v\n%s", err, out)
	}
	cli := &tandemCLI{bin: bin, dir: t.TempDir(), help: map[string]helpText{}}
	checked := 0
	for _, f := range docs(t, root) {
		for _, b := range read(t, root, f).Blocks {
			if b.Lang != "sh" && b.Lang != "bash" && b.Lang != "shell" {
				continue
			}
			cmds, err := SplitShell(b.Text, b.Line)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			for _, c := range cmds {
				args, ok := TandemArgs(c.Words)
				if !ok {
					continue
				}
				checked++
				if err := cli.check(args); err != nil {
					t.Errorf("%s:%d: tandem %s: %v", f, c.Line, strings.Join(args, " "), err)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no tandem command found in any sh block: the block or command pattern no longer matches the docs")
	}
	t.Logf("%d documented tandem commands checked", checked)
}

// helpText is what a command's --help says: its usage line and its flags, each
// with whether it is a boolean (a flag with no value word).
type helpText struct {
	usage string
	flags map[string]bool
}

type tandemCLI struct {
	bin, dir string
	help     map[string]helpText
}

var helpFlag = regexp.MustCompile(`^\s+--?([A-Za-z0-9][A-Za-z0-9_.-]*)(\s+\S+)?\s*$`)

// run runs the binary with args in an empty directory, without TANDEM_
// variables, and returns its output and exit error.
func (c *tandemCLI) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TANDEM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.New("did not stop within 30 s: --help was not reached, so it ran")
	}
	return out.String(), err
}

func (c *tandemCLI) helpOf(path []string) helpText {
	key := strings.Join(path, " ")
	if h, ok := c.help[key]; ok {
		return h
	}
	out, _ := c.run(append(append([]string{}, path...), "--help")...)
	h := helpText{flags: map[string]bool{}}
	for i, line := range strings.Split(out, "\n") {
		if i == 0 {
			h.usage = line
		}
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			h.flags[m[1]] = m[2] == ""
		}
	}
	c.help[key] = h
	return h
}

// check parses args as the documented command line.
func (c *tandemCLI) check(args []string) error {
	if len(args) == 0 {
		return errors.New("no command")
	}
	path := []string{args[0]}
	if h := c.helpOf(path); !strings.HasPrefix(h.usage, "Usage: tandem "+args[0]) && args[0] != "version" {
		return errors.New("no such command (its --help says: " + h.usage + ")")
	}
	rest := args[1:]
	// A subcommand (bench compare) is a word whose own --help names it.
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		sub := append(append([]string{}, path...), rest[0])
		if u := c.helpOf(sub).usage + " "; strings.HasPrefix(u, "Usage: tandem "+strings.Join(sub, " ")+" ") {
			path, rest = sub, rest[1:]
		}
	}
	h := c.helpOf(path)
	last := 0 // rest[:last] holds every flag and its value
	for i := 0; i < len(rest); i++ {
		w := rest[i]
		if w == "--" {
			break
		}
		if len(w) < 2 || w[0] != '-' {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		isBool, ok := h.flags[name]
		if !ok {
			return errors.New("tandem " + strings.Join(path, " ") + " has no flag --" + name)
		}
		if !isBool && !hasValue {
			if i+1 == len(rest) {
				return errors.New("flag --" + name + " needs a value")
			}
			i++
		}
		last = i + 1
	}
	for _, w := range rest {
		if strings.Contains(w, "$") {
			return errors.New("uses a shell variable (" + w + "); spell the value out so that it can be checked and copied")
		}
	}
	if strings.Join(path, " ") == "bench compare" {
		if err := c.checkWorkerFlags(rest[:last]); err != nil {
			return err
		}
	}
	line := append(append(append(append([]string{}, path...), rest[:last]...), "--help"), rest[last:]...)
	out, err := c.run(line...)
	if err != nil {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return errors.New(err.Error() + ": " + lines[len(lines)-1])
	}
	return nil
}

// braces are a deployment's flags in bench compare's --deployments: {flags} go
// to its decode workers, {role: flags} to that role.
var braces = regexp.MustCompile(`\{(?:([a-z]+):)?([^}]*)\}`)

// checkWorkerFlags checks the flags bench compare passes on to the processes
// it starts (--worker-args to every worker, --deployments' braces to a role)
// against those processes' own flags: bench compare's --help cannot.
func (c *tandemCLI) checkWorkerFlags(flags []string) error {
	roleOf := map[string][]string{"": {"decode", "prefill"}, "aggregated": {"decode"}, "router": {"router"}, "frontend": {"frontend"}}
	known := func(role, name string) bool {
		for _, cmd := range roleOf[role] {
			if _, ok := c.helpOf([]string{cmd}).flags[name]; ok {
				return true
			}
		}
		return false
	}
	checkWords := func(where, role, text string) error {
		if _, ok := roleOf[role]; !ok {
			return errors.New(where + ": no role " + role)
		}
		for _, w := range strings.Fields(text) {
			if len(w) < 2 || w[0] != '-' || (w[1] >= '0' && w[1] <= '9') {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if !known(role, name) {
				return errors.New(where + ": tandem " + strings.Join(roleOf[role], "/") + " has no flag --" + name)
			}
		}
		return nil
	}
	for i := 0; i+1 < len(flags); i++ {
		switch strings.TrimLeft(flags[i], "-") {
		case "worker-args":
			if err := checkWords("--worker-args", "", flags[i+1]); err != nil {
				return err
			}
		case "deployments":
			for _, m := range braces.FindAllStringSubmatch(flags[i+1], -1) {
				if err := checkWords("--deployments "+m[0], m[1], m[2]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
