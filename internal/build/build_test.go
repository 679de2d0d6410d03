package build

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99", Path: "example.com/cmd/x",
		Main: debug.Module{Path: "example.com", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: ContainerdModule, Version: "v2.9.9", Sum: "h1:c="},
			{Path: "k8s.io/client-go", Version: "v0.1.0", Replace: &debug.Module{Path: "example.com/client-go", Version: "v0.1.1", Sum: "h1:r="}},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "CGO_ENABLED", Value: "0"}},
	}
	for _, c := range []struct{ commit, want string }{{"", "abc"}, {"def", "def"}} {
		in := FromBuildInfo(bi, "x", "v1", c.commit)
		if in.Commit != c.want {
			t.Errorf("commit %q: got %q, want %q", c.commit, in.Commit, c.want)
		}
	}
	in := FromBuildInfo(bi, "x", "", "")
	if in.Version != "dev" || in.GoVersion != "go1.99" || in.Containerd != "v2.9.9" {
		t.Errorf("version %q go %q containerd %q", in.Version, in.GoVersion, in.Containerd)
	}
	if got := in.Noted["k8s.io/client-go"]; got != "v0.1.1" {
		t.Errorf("replaced client-go: %q, want the replacement's v0.1.1", got)
	}
	if got := in.Noted["github.com/opencontainers/runc"]; got != NotLinked {
		t.Errorf("runc: %q, want %q", got, NotLinked)
	}
	if len(in.Modules) != 2 || in.Modules[1].Replace == nil || in.Modules[1].Replace.Sum != "h1:r=" || len(in.Settings) != 2 {
		t.Errorf("modules %+v settings %+v", in.Modules, in.Settings)
	}
	var b bytes.Buffer
	if err := in.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"x dev\n", "commit:", "abc", "v0.1.0 => example.com/client-go v0.1.1", "runc          " + NotLinked + "\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	if none := FromBuildInfo(nil, "x", "v1", ""); none.Commit != "unknown" || none.Containerd != NotLinked || len(none.Modules) != 0 {
		t.Errorf("no build info: %+v", none)
	}
}
