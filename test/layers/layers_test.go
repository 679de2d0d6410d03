// Package layers guards the shape of the code: imports run downward, the
// node binary links no informers, the import links no sigstore, and no
// production file or function outgrows what one reader holds in mind. It
// reads the real dependency graph (go list) and the real sources (go/parser).
package layers

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/holdfast-project/holdfast/"

// rank is each package's layer, lowest first: a package may import only
// packages of a lower rank. A package missing here fails the test, so the
// table is kept with the tree.
var rank = map[string]int{
	// files and units: below the leaves that write, lock or open files, or
	// say sizes
	"internal/files": 0, "internal/units": 0,
	// leaves: no project import but files and units
	"internal/lineerr": 1, "internal/backoff": 1, "internal/pattern": 1,
	"internal/datadir": 1, "internal/notify": 1, "internal/report": 1,
	"internal/testenv": 1, "internal/fixture": 1, "internal/archive/zstdframe": 1,
	"internal/embedded/daemon": 1, "internal/oci": 1, "internal/progress": 1, "internal/cmddoc": 1,
	"internal/build": 1, // what a binary says of itself: version, commit, modules
	// formats and the wire's users, and the embedded containerd (in the data dir)
	"internal/archive": 2, "internal/registries": 2, "internal/journal": 2, "internal/metrics": 2, "internal/embedded": 2,
	"internal/signature/sigtest": 2, "internal/flagenv": 2,
	"internal/imageset": 2, // the ImageSet resource: its status, its waves
	// the seam (ports, domain types), and the scan
	"internal/runtime": 3, "internal/source": 3, "internal/signature/layout": 3,
	"internal/kubeapi":   3, // reads the NodeImages and the ImageSets
	"internal/reconcile": 4, "internal/workload": 4, "internal/watch": 4, "internal/signature": 4,
	"internal/server":   4, // the agent's HTTP; its token file is judged as lists are (files)
	"internal/reporter": 5,
	"internal/kubelet":  5, // its re-pull rule reads workloads' images
	// the import and export use cases, then the backends that serve them
	"internal/importer": 6, "internal/exporter": 6,
	"internal/runtime/containerd": 7, "internal/runtime/fake": 7, "internal/runtime/runtimetest": 7,
	"internal/testenv/testimage": 8,
	"internal/pass":              8,
	"internal/agent":             9,
	"internal/cli":               10,
	"cmd/holdfast":               11, "cmd/holdfast-containerd": 11, "cmd/holdfast-reporter": 11,
	"tools/imagegen": 11, "tools/mkimage": 11, "tools/release": 11, "tools/sbom": 11,
}

// useCases are what the runtime's packages serve and so must not import.
var useCases = []string{"internal/importer", "internal/exporter", "internal/pass", "internal/agent", "internal/cli", "internal/server", "internal/reporter"}

// debts are known breaches of the rules below, each to be paid off; the test
// fails when one is gone (take it out of the list) as well as when a new one
// appears, so the list only shrinks.
var debts = map[string]bool{}

const (
	maxFileLines = 600
	maxFuncLines = 100
)

// graph is every package the module's packages reach, with its imports.
type graph map[string][]string

func load(t *testing.T) graph {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the dependency test reads the graph with go list: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, stderr.String())
	}
	g := graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	return g
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// chain is the shortest import path from one package to the first that
// matches, or nil.
func (g graph) chain(from string, match func(string) bool) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != from && match(p) {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append([]string{strings.TrimPrefix(p, module)}, path...)
			}
			return path
		}
		for _, q := range g[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// ours is the project's packages, by their path inside the module, test
// trees left out (they may reach anything).
func (g graph) ours() []string {
	var out []string
	for p := range g {
		if rel, ok := strings.CutPrefix(p, module); ok && !strings.HasPrefix(rel, "test/") {
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out
}

// breaches collects what breaks a rule; seen debts are ticked off.
type breaches struct {
	t    *testing.T
	seen map[string]bool
}

func (b *breaches) report(key, detail string) {
	if debts[key] {
		b.seen[key] = true
		return
	}
	b.t.Errorf("%s: %s", key, detail)
}

func (b *breaches) unpaid() {
	for key := range debts {
		if !b.seen[key] {
			b.t.Errorf("%q no longer holds: take it out of debts", key)
		}
	}
}

func TestLayers(t *testing.T) {
	g := load(t)
	b := &breaches{t: t, seen: map[string]bool{}}
	for _, p := range g.ours() {
		r, ok := rank[p]
		if !ok {
			t.Errorf("%s has no layer: add it to the rank table in test/layers", p)
			continue
		}
		for _, imp := range g[module+p] {
			q, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if rq, ok := rank[q]; ok && rq >= r {
				b.report(p+" imports "+q, fmt.Sprintf("an import upward or sideways (rank %d imports rank %d)", r, rq))
			}
			if strings.HasPrefix(p, "internal/runtime") {
				for _, u := range useCases {
					if q == u {
						b.report(p+" imports "+q, "the runtime's packages import no use case")
					}
				}
			}
			if q == "internal/cli" && !strings.HasPrefix(p, "cmd/") {
				b.report(p+" imports "+q, "only cmd/ imports the commands")
			}
		}
	}
	for _, rule := range []struct {
		from, why string
		bad       func(string) bool
	}{
		{"cmd/holdfast", "the node binary links no client-go informers", func(p string) bool {
			return strings.HasPrefix(p, "k8s.io/client-go/informers") || p == "k8s.io/client-go/tools/cache"
		}},
		{"internal/importer", "the import links no sigstore", sigstore},
		{"internal/exporter", "the export links no sigstore", sigstore},
		{"internal/runtime/containerd", "the containerd adapter links no sigstore", sigstore},
		{"cmd/holdfast", "only the embedded containerd's binary links containerd's server", func(p string) bool {
			return p == "github.com/containerd/containerd/v2/cmd/containerd/command"
		}},
	} {
		if c := g.chain(module+rule.from, rule.bad); c != nil {
			key := rule.from + " links sigstore"
			if !strings.Contains(rule.why, "sigstore") {
				key = rule.from + " links " + c[len(c)-1]
			}
			b.report(key, rule.why+": "+strings.Join(c, " -> "))
		}
	}
	for _, p := range g.ours() {
		if p == "internal/runtime/containerd" || p == "internal/embedded/daemon" {
			continue
		}
		for _, imp := range g[module+p] {
			if imp == "github.com/containerd/containerd/v2/client" {
				b.report(p+" imports containerd's client", "only internal/runtime/containerd speaks to containerd")
			}
		}
	}
	for _, p := range g.ours() {
		for _, imp := range g[module+p] {
			if imp == kubeYAML && kubeReaders[p] {
				continue
			}
			if otherYAML(imp) {
				b.report(p+" imports "+imp, "the project reads and writes YAML with "+yamlLibrary+
					", and with "+kubeYAML+" only where it reads as kubectl and the kubelet do")
			}
		}
	}
	sizes(t, b)
	b.unpaid()
}

func sigstore(p string) bool { return strings.HasPrefix(p, "github.com/sigstore/") }

// yamlLibrary is the YAML library the project's own code imports; the
// libraries it links may bring others (client-go brings sigs.k8s.io/yaml).
// kubeYAML, apimachinery's reader (YAML to JSON, as kubectl and the kubelet
// decode), is used only by kubeReaders: workload manifests for check, and
// the kubelet's configuration, must be read exactly as those tools read them.
const (
	yamlLibrary = "go.yaml.in/yaml/v3"
	kubeYAML    = "k8s.io/apimachinery/pkg/util/yaml"
)

var kubeReaders = map[string]bool{"internal/workload": true, "internal/kubelet": true}

func otherYAML(p string) bool {
	return p != yamlLibrary && (p == kubeYAML || p == "sigs.k8s.io/yaml" || strings.HasPrefix(p, "gopkg.in/yaml.") ||
		strings.HasPrefix(p, "go.yaml.in/yaml/") || p == "github.com/goccy/go-yaml" || p == "github.com/ghodss/yaml")
}

// sizes: no production file over maxFileLines, no function over maxFuncLines.
func sizes(t *testing.T, b *breaches) {
	dir := root(t)
	fset := token.NewFileSet()
	for _, top := range []string{"internal", "cmd", "tools"} {
		err := filepath.WalkDir(filepath.Join(dir, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
				b.report("file "+rel, fmt.Sprintf("%d lines, more than %d", n, maxFileLines))
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
					b.report("func "+rel+" "+fn.Name.Name, fmt.Sprintf("%d lines, more than %d", n, maxFuncLines))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
