// Package services assembles the domain packages into running services; its
// subpackages hold what every service process shares.
package services

import (
	"flag"
	"strings"
)

// List is a comma-separated flag value.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set replaces the list, so an environment default can be overridden by a flag.
func (l *List) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// EnvName is the environment variable that sets a flag: TANDEM_ and the flag's
// name in upper case with dashes as underscores (--short-prefill-threshold is
// TANDEM_SHORT_PREFILL_THRESHOLD).
func EnvName(flagName string) string {
	return "TANDEM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets every flag not given on the command line from its environment
// variable, if that is set. Command-line flags win.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = &EnvError{Var: EnvName(f.Name), Err: e}
			}
		}
	})
	return err
}

// EnvError names the environment variable whose value was invalid.
type EnvError struct {
	Var string
	Err error
}

func (e *EnvError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *EnvError) Unwrap() error { return e.Err }
