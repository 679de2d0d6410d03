package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// holdfast version -o json names the modules the binary links as go version
// -m reads them from the binary: the containerd client, client-go and
// sigstore-go, with their sums; the text names the containerd client's.
func TestVersionMatchesGoVersionM(t *testing.T) {
	m, err := exec.Command("go", "version", "-m", holdfastBin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", holdfastBin, err)
	}
	deps := map[string][2]string{} // path → version, sum
	for _, line := range strings.Split(string(m), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "dep" {
			sum := ""
			if len(f) >= 4 {
				sum = f[3]
			}
			deps[f[1]] = [2]string{f[2], sum}
		}
	}
	out, err := exec.Command(holdfastBin, "version", "-o", "json").Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("holdfast version -o json: %v: %s", err, ee.Stderr)
	} else if err != nil {
		t.Fatalf("holdfast version -o json: %v", err)
	}
	var v struct {
		Version, Commit, GoVersion, Containerd string
		Noted                                  map[string]string
		Modules                                []struct{ Path, Version, Sum string }
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("holdfast version -o json: %v\n%s", err, out)
	}
	got := map[string][2]string{}
	for _, mod := range v.Modules {
		got[mod.Path] = [2]string{mod.Version, mod.Sum}
	}
	if len(got) != len(deps) {
		t.Errorf("version -o json lists %d modules, go version -m %d", len(got), len(deps))
	}
	for _, mod := range []string{"github.com/containerd/containerd/v2", "k8s.io/client-go", "github.com/sigstore/sigstore-go"} {
		want, ok := deps[mod]
		if !ok {
			t.Errorf("go version -m does not list %s", mod)
			continue
		}
		if got[mod] != want || v.Noted[mod] != want[0] {
			t.Errorf("%s: version -o json says %v (noted %q), go version -m %v", mod, got[mod], v.Noted[mod], want)
		}
	}
	cd := deps["github.com/containerd/containerd/v2"][0]
	if v.Containerd != cd || v.Version != "e2e" || v.GoVersion == "" || v.Commit == "" {
		t.Errorf("version -o json: containerd %q (go version -m: %s), version %q, go %q, commit %q", v.Containerd, cd, v.Version, v.GoVersion, v.Commit)
	}
	text, err := exec.Command(holdfastBin, "version").Output()
	if err != nil || !strings.Contains(string(text), "containerd client:  "+cd+"\n") {
		t.Errorf("holdfast version: %v, want the containerd client %s:\n%s", err, cd, text)
	}
}
