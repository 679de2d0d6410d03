// Package flagenv is the rule by which an environment variable sets a
// command's flag: the variable's name (HOLDFAST_ and the flag's name), which
// flags have one, what their help says of it, and setting a flag from it when
// the flag is not given.
package flagenv

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/holdfast-project/holdfast/internal/cmddoc"
)

// annotation marks a flag that its environment variable sets when the flag
// is not given on the command line.
const annotation = "holdfast_env"

// Name is the environment variable of the flag named flag: HOLDFAST_ and
// the flag's name upper-cased, each '-' an '_' (--write-path:
// HOLDFAST_WRITE_PATH). Every flag's variable is named by this rule alone.
func Name(flag string) string {
	return "HOLDFAST_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Allow lets each named flag of fs be set from its environment variable
// (Name) and ends its help with what Help says of that variable, so the
// help names the variable that is read. It panics on a name fs does not have:
// the flags are defined just before.
func Allow(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, annotation, []string{"true"}); err != nil {
			panic(fmt.Sprintf("flagenv.Allow: %v", err))
		}
		f := fs.Lookup(n)
		f.Usage += " (" + Help(f) + ")"
	}
}

// Of returns the environment variable that sets f, and false for a flag
// that no variable sets.
func Of(f *pflag.Flag) (string, bool) {
	if _, ok := f.Annotations[annotation]; !ok {
		return "", false
	}
	return Name(f.Name), true
}

// Help is what a flag's help says of its environment variable: "env NAME",
// and for a repeatable flag that the variable holds a colon-separated list.
func Help(f *pflag.Flag) string {
	env, _ := Of(f)
	if IsList(f) {
		return "env " + env + ", colon-separated"
	}
	return "env " + env
}

// IsList reports whether f is repeatable, its environment variable a list
// (filepath.SplitList: colon-separated).
func IsList(f *pflag.Flag) bool {
	return f.Value.Type() == "stringArray"
}

// Set sets f from its environment variable when the flag was not given
// and the variable is set and not empty. The variable of a repeatable flag
// gives one value per element of its list, empty elements skipped.
func Set(f *pflag.Flag, lookup func(string) (string, bool)) error {
	env, ok := Of(f)
	if !ok || f.Changed {
		return nil
	}
	v, ok := lookup(env)
	if !ok || v == "" {
		return nil
	}
	values := []string{v}
	if IsList(f) {
		values = filepath.SplitList(v)
	}
	for _, s := range values {
		if s == "" {
			continue
		}
		if err := f.Value.Set(s); err != nil {
			return fmt.Errorf("%s: %w", env, err)
		}
	}
	return nil
}

// SetAll sets each flag of fs that was not given from its variable (Set),
// and returns every variable's error.
func SetAll(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if err := Set(f, lookup); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

// Doc is the variable that sets f as the command reference shows it.
func Doc(f *pflag.Flag) (cmddoc.EnvVar, bool) {
	name, ok := Of(f)
	return cmddoc.EnvVar{Name: name, Help: Help(f), List: IsList(f)}, ok
}
