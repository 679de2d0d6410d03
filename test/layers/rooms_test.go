package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Each rule below keeps a piece of knowledge in the one room that owns it.

// cliDenied are the packages the commands reach only through the package
// that owns the rule: a command parses flags, makes one call and renders.
var cliDenied = []string{"internal/reconcile", "internal/archive", "internal/signature/layout"}

// testSupport are the packages that exist for tests: they may spell OCI
// literals and import anything, and no binary under cmd/ links them.
var testSupport = []string{
	"internal/fixture", "internal/testenv", "internal/testenv/testimage", "internal/signature/sigtest",
	"internal/runtime/fake", "internal/runtime/runtimetest",
}

// ociPackage is where OCI's media types and containerd's annotations are
// spelled; ociLiterals are the spellings no other production code holds.
const ociPackage = "internal/oci"

var ociLiterals = []string{
	"application/vnd.docker.distribution.manifest",
	"application/vnd.oci.image.",
	"io.containerd.image.name",
	"io.containerd.manifest.subject",
}

// zstdModule is read and written only by the zstd package under archive.
const zstdModule = "github.com/klauspost/compress/zstd"

func isTestSupport(p string) bool {
	for _, s := range testSupport {
		if p == s {
			return true
		}
	}
	return false
}

// isZstdPackage is the package of zstd frames inside internal/archive.
func isZstdPackage(p string) bool {
	rel, ok := strings.CutPrefix(p, "internal/archive/")
	return ok && strings.Contains(rel, "zstd")
}

func TestRooms(t *testing.T) {
	g := load(t)
	b := &breaches{t: t, seen: map[string]bool{}}
	for _, imp := range g[module+"internal/cli"] {
		for _, d := range cliDenied {
			if imp == module+d || strings.HasPrefix(imp, module+d+"/") {
				b.report("internal/cli imports "+strings.TrimPrefix(imp, module),
					"the commands reach it only through the package that owns its rule")
			}
		}
	}
	zstdFound := false
	for _, p := range g.ours() {
		if isZstdPackage(p) {
			zstdFound = true
		}
		if isTestSupport(p) || isZstdPackage(p) {
			continue
		}
		for _, imp := range g[module+p] {
			if imp == zstdModule || strings.HasPrefix(imp, zstdModule+"/") {
				b.report(p+" imports "+imp, "only the zstd package under internal/archive reads and writes zstd")
			}
		}
	}
	if !zstdFound {
		t.Errorf("no zstd package under internal/archive: the zstd rule checks nothing")
	}
	for _, p := range g.ours() {
		if !strings.HasPrefix(p, "cmd/") {
			continue
		}
		if c := g.chain(module+p, func(q string) bool {
			rel, ours := strings.CutPrefix(q, module)
			return ours && isTestSupport(rel)
		}); c != nil {
			b.report(p+" links test support", "no binary links what exists for tests: "+strings.Join(c, " -> "))
		}
	}
	if c := g.chain(module+"cmd/holdfast-reporter", func(q string) bool {
		return q == module+"internal/archive" || strings.HasPrefix(q, module+"internal/archive/") ||
			strings.HasPrefix(q, "github.com/klauspost/compress")
	}); c != nil {
		b.report("cmd/holdfast-reporter links archive code", "the reporter reads no archive: "+strings.Join(c, " -> "))
	}
	ociLiteralsOutside(t, b)
	b.unpaid()
}

// ociLiteralsOutside reports every string literal of production code outside
// the OCI package and test support that is an OCI literal (prose that names
// one, as a command's help does, is not).
func ociLiteralsOutside(t *testing.T, b *breaches) {
	dir := root(t)
	fset := token.NewFileSet()
	found := false
	for _, top := range []string{"internal", "cmd", "tools"} {
		err := filepath.WalkDir(filepath.Join(dir, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			pkg := filepath.ToSlash(filepath.Dir(rel))
			if pkg == ociPackage {
				found = true
			}
			if pkg == ociPackage || isTestSupport(pkg) || strings.HasPrefix(pkg, "tools/") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, l := range ociLiterals {
					if strings.HasPrefix(s, l) {
						b.report("OCI literal in "+rel, fmt.Sprintf("%q at line %d: spell it with %s", s,
							fset.Position(lit.Pos()).Line, ociPackage))
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !found {
		t.Errorf("no %s: the OCI literal rule checks nothing", ociPackage)
	}
}
