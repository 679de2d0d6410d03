package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
)

// envAnnotation marks a flag that its environment variable sets when the flag
// is not given on the command line.
const envAnnotation = "holdfast_env"

// envName is the environment variable of the flag named flag: HOLDFAST_ and
// the flag's name upper-cased, each '-' an '_' (--write-path:
// HOLDFAST_WRITE_PATH). Every flag's variable is named by this rule alone.
func envName(flag string) string {
	return "HOLDFAST_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// withEnv lets each named flag of fs be set from its environment variable
// (envName) and ends its help with what envHelp says of that variable, so the
// help names the variable that is read. It panics on a name fs does not have:
// the flags are defined just before.
func withEnv(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, envAnnotation, []string{"true"}); err != nil {
			panic(fmt.Sprintf("withEnv: %v", err))
		}
		f := fs.Lookup(n)
		f.Usage += " (" + envHelp(f) + ")"
	}
}

// flagEnv returns the environment variable that sets f, and false for a flag
// that no variable sets.
func flagEnv(f *pflag.Flag) (string, bool) {
	if _, ok := f.Annotations[envAnnotation]; !ok {
		return "", false
	}
	return envName(f.Name), true
}

// envHelp is what a flag's help says of its environment variable: "env NAME",
// and for a repeatable flag that the variable holds a colon-separated list.
func envHelp(f *pflag.Flag) string {
	env, _ := flagEnv(f)
	if isListFlag(f) {
		return "env " + env + ", colon-separated"
	}
	return "env " + env
}

// isListFlag reports whether f is repeatable, its environment variable a list
// (filepath.SplitList: colon-separated).
func isListFlag(f *pflag.Flag) bool {
	return f.Value.Type() == "stringArray"
}

// setFromEnv sets f from its environment variable when the flag was not given
// and the variable is set and not empty. The variable of a repeatable flag
// gives one value per element of its list, empty elements skipped.
func setFromEnv(f *pflag.Flag, lookup func(string) (string, bool)) error {
	env, ok := flagEnv(f)
	if !ok || f.Changed {
		return nil
	}
	v, ok := lookup(env)
	if !ok || v == "" {
		return nil
	}
	values := []string{v}
	if isListFlag(f) {
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
