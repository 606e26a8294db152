package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/tandem-serve/tandem/services"
)

// newFlagSet makes a command's flag set with a help text that lists every flag
// with its environment variable.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tandem %s\n\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			name, help := flag.UnquoteUsage(f)
			fmt.Fprintf(fs.Output(), "  --%s %s\n", f.Name, name)
			fmt.Fprintf(fs.Output(), "        %s", help)
			if f.DefValue != "" {
				fmt.Fprintf(fs.Output(), " (default %s)", f.DefValue)
			}
			fmt.Fprintf(fs.Output(), "\n        env %s\n", services.EnvName(f.Name))
		})
	}
	return fs
}

// parse parses args, then fills the flags not given from the environment.
func parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return services.ApplyEnv(fs, getenv)
}

func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
