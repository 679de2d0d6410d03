package workload

import (
	"bytes"
	"encoding/binary"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fileLine is how the errors of Set.Read name where they are: the file,
// then the line (a separator kubectl refuses, a line of references), the
// line and the document's index, or the use (file#document kind name
// container) for an image that does not parse.
var fileLine = regexp.MustCompile(`^in(?::([0-9]+)(?:: document ([0-9]+))?: |#([0-9]+) |: )`)

// FuzzRead: holdfast check reads manifests a person gives it; whatever
// they hold, Read does not panic, every error names the file and the line
// (within the file) or the document, and every image read is normalised.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		twoDeployments,
		jsonStream,
		"nginx\n# a comment\nredis:7 # pinned\n---\n",
		strings.Replace(twoDeployments, "---\n", "---\n}{ not: [yaml\n---\n", 1),
		strings.Replace(twoDeployments, "---\n", "--- !!map\n", 1),
		strings.Replace(twoDeployments, "---\n", "---\nkind: ConfigMap\n...\nkind: Secret\n---\n", 1),
		strings.Replace(jsonStream, "}\n{", "}\n{\"kind\": }\n{", 1),
		`{"kind": "List", "items": [{"kind": "Pod", "spec": {"containers": [{"name": "a", "image": "a:1"}]}}, 3]}`,
		"kind: Pod\nspec:\n  containers: [{name: a, image: 'Not A Ref'}, {name: b}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Add(utf16Text(twoDeployments, binary.LittleEndian))
	for _, name := range []string{"testdata/kinds.yaml", "testdata/chart.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Set
		s.Read("in", data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, err := range s.Errors {
			m := fileLine.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("error %q names no file and line", err)
			}
			if m[1] != "" {
				if n, _ := strconv.Atoi(m[1]); n < 1 || n > lines {
					t.Fatalf("error %q: line %d of a file of %d", err, n, lines)
				}
			}
			for _, doc := range []string{m[2], m[3]} {
				if n, _ := strconv.Atoi(doc); doc != "" && n < 1 {
					t.Fatalf("error %q: document %d", err, n)
				}
			}
		}
		for _, img := range s.Images() {
			if img.Ref == "" || len(img.Uses) == 0 {
				t.Fatalf("image %+v", img)
			}
		}
	})
}
