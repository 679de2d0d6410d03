package cli_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/build"
)

// A test binary carries no module list in its build info (the go command
// leaves it out), so this builds holdfast as make build does and asks it:
// version -o json names, for the containerd client, client-go and
// sigstore-go, the versions go list -m gives for the module, and the text
// says the containerd client's too.
func TestVersionNamesLinkedModules(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds holdfast")
	}
	bin := filepath.Join(t.TempDir(), "holdfast")
	b := exec.Command("go", "build", "-ldflags", "-X main.version=v9.9.9-test -X main.commit=c0ffee", "-o", bin, "../../cmd/holdfast")
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/holdfast: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("holdfast version -o json: %v", err)
	}
	var in build.Info
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if in.Program != "holdfast" || in.Version != "v9.9.9-test" || in.Commit != "c0ffee" || in.GoVersion == "" || in.OS == "" || in.Arch == "" {
		t.Errorf("version -o json: program %q version %q commit %q go %q platform %s/%s", in.Program, in.Version, in.Commit, in.GoVersion, in.OS, in.Arch)
	}
	for _, mod := range []string{build.ContainerdModule, "k8s.io/client-go", "github.com/sigstore/sigstore-go"} {
		want, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", mod).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", mod, err)
		}
		v := strings.TrimSpace(string(want))
		if got := in.Noted[mod]; got != v {
			t.Errorf("version -o json: noted %s %q; go list -m says %s", mod, got, v)
		}
		found := false
		for _, m := range in.Modules {
			found = found || m.Path == mod && m.Version == v && m.Sum != ""
		}
		if !found {
			t.Errorf("version -o json: modules lack %s %s with its sum", mod, v)
		}
		if mod == build.ContainerdModule && in.Containerd != v {
			t.Errorf("version -o json: containerd %q; go list -m says %s", in.Containerd, v)
		}
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(text), "holdfast v9.9.9-test\n") ||
		!strings.Contains(string(text), "containerd client:  "+in.Containerd+"\n") || !strings.Contains(string(text), "c0ffee") {
		t.Errorf("version: %v, want the version, commit and containerd client %s:\n%s", err, in.Containerd, text)
	}
}

func TestVersionRefusesUnknownOutput(t *testing.T) {
	_, errOut, code := holdfast(t, "version", "-o", "yaml")
	if code != 2 || !strings.Contains(errOut, `-o "yaml": want text or json`) {
		t.Errorf("version -o yaml: exit %d, %q; want 2 and the formats", code, errOut)
	}
}
