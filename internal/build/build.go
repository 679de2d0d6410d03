// Package build says what a binary of holdfast is: its version and commit
// (set at build time), the Go that built it, and the modules linked into it, as
// a bug report needs them.
package build

import (
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

// ContainerdModule is the containerd client linked into holdfast: its version is
// the client's, whatever containerd it talks to.
const ContainerdModule = "github.com/containerd/containerd/v2"

// Noted are the modules a bug report names first: those that speak to
// containerd, Kubernetes and registries, and verify signatures.
var Noted = []string{
	ContainerdModule,
	"k8s.io/client-go",
	"github.com/sigstore/sigstore-go",
	"github.com/google/go-containerregistry",
	"github.com/opencontainers/runc",
}

// NotLinked stands for the version of a noted module the binary does not link.
const NotLinked = "not linked"

// Module is one module of the build info.
type Module struct {
	Path    string  `json:"path"`
	Version string  `json:"version"`
	Sum     string  `json:"sum,omitempty"`
	Replace *Module `json:"replace,omitempty"`
}

// Setting is one build setting (-ldflags, CGO_ENABLED, GOARCH, vcs.revision...).
type Setting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Info is what a binary says of itself.
type Info struct {
	Program   string `json:"program"`
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	// Containerd is the containerd client's version, or NotLinked.
	Containerd string `json:"containerd"`
	// Noted maps each of Noted to its version (the replacement's when
	// replaced), or NotLinked.
	Noted    map[string]string `json:"noted"`
	Path     string            `json:"path,omitempty"`
	Main     *Module           `json:"main,omitempty"`
	Modules  []Module          `json:"modules"`
	Settings []Setting         `json:"settings,omitempty"`
}

// Read gathers the Info of the running binary: version and commit as its
// build set them (an empty commit falls back to the build info's vcs.revision,
// else "unknown"), the rest from debug.ReadBuildInfo.
func Read(program, version, commit string) Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi, program, version, commit)
}

// FromBuildInfo is Read of a given build info (nil: none).
func FromBuildInfo(bi *debug.BuildInfo, program, version, commit string) Info {
	in := Info{Program: program, Version: version, Commit: commit, GoVersion: goruntime.Version(),
		OS: goruntime.GOOS, Arch: goruntime.GOARCH, Modules: []Module{}}
	if in.Version == "" {
		in.Version = "dev"
	}
	if bi != nil {
		in.GoVersion = bi.GoVersion
		in.Path = bi.Path
		if bi.Main.Path != "" {
			m := module(&bi.Main)
			in.Main = &m
		}
		for _, d := range bi.Deps {
			in.Modules = append(in.Modules, module(d))
		}
		for _, s := range bi.Settings {
			in.Settings = append(in.Settings, Setting{Key: s.Key, Value: s.Value})
			if s.Key == "vcs.revision" && in.Commit == "" {
				in.Commit = s.Value
			}
		}
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	in.Noted = make(map[string]string, len(Noted))
	for _, p := range Noted {
		in.Noted[p] = in.ModuleVersion(p)
	}
	in.Containerd = in.Noted[ContainerdModule]
	return in
}

func module(m *debug.Module) Module {
	out := Module{Path: m.Path, Version: m.Version, Sum: m.Sum}
	if m.Replace != nil {
		r := module(m.Replace)
		out.Replace = &r
	}
	return out
}

// ModuleVersion is the version of the linked module path (its replacement's
// when replaced), or NotLinked.
func (in Info) ModuleVersion(path string) string {
	for _, m := range in.Modules {
		if m.Path != path {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		return m.Version
	}
	return NotLinked
}

// WriteText writes the Info for people: one line of version, then commit, Go,
// platform, the containerd client and the modules of note.
func (in Info) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s %s\n", in.Program, in.Version)
	fmt.Fprintf(tw, "  commit:\t%s\n", in.Commit)
	fmt.Fprintf(tw, "  go:\t%s\n", in.GoVersion)
	fmt.Fprintf(tw, "  platform:\t%s/%s\n", in.OS, in.Arch)
	fmt.Fprintf(tw, "  containerd client:\t%s\n", in.Containerd)
	fmt.Fprintln(tw, "  modules of note:")
	for _, p := range Noted {
		fmt.Fprintf(tw, "    %s\t%s\n", p, in.noted(p))
	}
	return tw.Flush()
}

// noted is the text of a noted module: its version, with its replacement.
func (in Info) noted(path string) string {
	for _, m := range in.Modules {
		if m.Path == path {
			return m.String()
		}
	}
	return NotLinked
}

// String is the module as go version -m spells a dependency: version, then
// "=> path version" when replaced.
func (m Module) String() string {
	var b strings.Builder
	b.WriteString(m.Version)
	if m.Replace != nil {
		fmt.Fprintf(&b, " => %s", m.Replace.Path)
		if m.Replace.Version != "" {
			fmt.Fprintf(&b, " %s", m.Replace.Version)
		}
	}
	return strings.TrimSpace(b.String())
}
