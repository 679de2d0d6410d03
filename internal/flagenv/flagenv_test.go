package flagenv

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestEnvSetsFlags: a flag's environment variable sets it when the flag is
// not given; a given flag wins; a repeatable flag takes a colon-separated
// list, empty elements skipped; a bad value is an error naming the variable.
func TestEnvSetsFlags(t *testing.T) {
	env := map[string]string{
		"HOLDFAST_NAMESPACE":    "from-env",
		"HOLDFAST_IMAGES":       "/a::/b",
		"HOLDFAST_LOG_LEVEL":    "debug",
		"HOLDFAST_PULL_TIMEOUT": "soon",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	ns := fs.String("namespace", "k8s.io", "")
	images := fs.StringArray("images", nil, "")
	level := fs.String("log-level", "info", "")
	timeout := fs.Duration("pull-timeout", 0, "")
	other := fs.String("other", "x", "")
	Allow(fs, "namespace", "images", "log-level", "pull-timeout")
	if err := fs.Parse([]string{"--log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	var errs []string
	fs.VisitAll(func(f *pflag.Flag) {
		if err := Set(f, lookup); err != nil {
			errs = append(errs, err.Error())
		}
	})
	if *ns != "from-env" || strings.Join(*images, ",") != "/a,/b" || *level != "warn" || *other != "x" || *timeout != 0 {
		t.Errorf("namespace %q, images %q, log-level %q, other %q, pull-timeout %v", *ns, *images, *level, *other, *timeout)
	}
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "HOLDFAST_PULL_TIMEOUT: ") {
		t.Errorf("errors %q, want one naming HOLDFAST_PULL_TIMEOUT", errs)
	}
}
