package workload

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// twoDeployments is two Deployments, the second's image the one a reader
// that stops after the first object never sees.
const twoDeployments = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: api, image: "registry.example.com/shop/api:2.0"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: worker, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: w, image: "registry.example.com/shop/worker:2.0"}]
`

// jsonStream is what kubectl get -o json | jq '.items[]' writes: objects
// one after another, not a list.
const jsonStream = `{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {"name": "api", "namespace": "shop"},
  "spec": {"template": {"spec": {"containers": [{"name": "api", "image": "registry.example.com/shop/api:2.0"}]}}}
}
{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {"name": "worker", "namespace": "shop"},
  "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "registry.example.com/shop/worker:2.0"}]}}}
}
`

// utf16Text is s in UTF-16 with its byte order mark, as PowerShell's >
// writes it.
func utf16Text(s string, order binary.AppendByteOrder) []byte {
	out := order.AppendUint16(nil, 0xfeff)
	for _, u := range utf16.Encode([]rune(s)) {
		out = order.AppendUint16(out, u)
	}
	return out
}

var bothImages = []string{"registry.example.com/shop/api:2.0", "registry.example.com/shop/worker:2.0"}

// TestStreams: every object of the stream is read, whatever wrote it:
// Windows line ends, a stream of JSON objects, UTF-16 from PowerShell (both
// byte orders), and YAML's tagged document start.
func TestStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"crlf", []byte(strings.ReplaceAll(twoDeployments, "\n", "\r\n"))},
		{"json objects", []byte(jsonStream)},
		{"json objects crlf", []byte(strings.ReplaceAll(jsonStream, "\n", "\r\n"))},
		{"utf-16le", utf16Text(strings.ReplaceAll(twoDeployments, "\n", "\r\n"), binary.LittleEndian)},
		{"utf-16be", utf16Text(twoDeployments, binary.BigEndian)},
		{"utf-16le json", utf16Text(jsonStream, binary.LittleEndian)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Set
			s.Read("in", tc.data)
			if got := refs(&s); !slices.Equal(got, bothImages) {
				t.Errorf("images %q, want %q", got, bothImages)
			}
			if len(s.Errors) != 0 {
				t.Errorf("errors: %v", s.Errors)
			}
			if len(s.Images()) == 2 {
				if u := s.Images()[1].Uses[0]; u.String() != "in#2 Deployment shop/worker containers/w" {
					t.Errorf("the second Deployment's use is %q", u)
				}
			}
		})
	}
}

// TestTaggedSeparator: a document start with a tag after it (--- !!map)
// is a document separator to YAML, which kubectl refuses: an error naming
// the file and the line, and every document still read.
func TestTaggedSeparator(t *testing.T) {
	var s Set
	s.Read("tagged.yaml", []byte("--- !!map\n"+strings.Replace(twoDeployments, "---\n", "--- !!map\n", 1)))
	if got := refs(&s); !slices.Equal(got, bothImages) {
		t.Errorf("images %q, want %q", got, bothImages)
	}
	var errs []string
	for _, e := range s.Errors {
		errs = append(errs, e.Error())
	}
	want := []string{
		`tagged.yaml:1: a document separator followed by "!!map": kubectl refuses it; put nothing but a comment after ---`,
		`tagged.yaml:9: a document separator followed by "!!map": kubectl refuses it; put nothing but a comment after ---`,
	}
	if !slices.Equal(errs, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(errs, "\n"), strings.Join(want, "\n"))
	}
	if len(s.Images()) == 2 {
		if u := s.Images()[1].Uses[0]; u.String() != "tagged.yaml#2 Deployment shop/worker containers/w" {
			t.Errorf("the second Deployment's use is %q", u)
		}
	}
}

// TestGarbageDocument: a document that is neither YAML nor JSON, not an
// object, or followed by another without a separator (which YAML decoders,
// kubectl's too, drop without a word), is an error naming the file, the
// line it begins at and its index; the other documents are read.
func TestGarbageDocument(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // prefixes of the errors
	}{
		{"yaml", strings.Replace(twoDeployments, "---\n", "---\n}{ not: [yaml\n---\n", 1),
			[]string{"in:9: document 2: error converting YAML to JSON: yaml: did not find expected node content"}},
		{"binary", strings.Replace(twoDeployments, "---\n", "---\n\x00\x01\x02\x03\n---\n", 1),
			[]string{"in:9: document 2: error converting YAML to JSON: yaml: control characters are not allowed"}},
		{"no kind", strings.Replace(twoDeployments, "---\n", "---\nfoo: bar\n---\n", 1),
			[]string{"in:9: document 2: not a Kubernetes object: no kind"}},
		{"two flow mappings", strings.Replace(twoDeployments, "---\n", "---\n{kind: ConfigMap}\n{kind: Secret}\n---\n", 1),
			[]string{"in:9: document 2: more than one YAML document with no --- line between them: yaml: line 9: did not find expected <document start>"}},
		{"document end", strings.Replace(twoDeployments, "---\n", "---\nkind: ConfigMap\n...\nkind: Secret\n---\n", 1),
			[]string{"in:9: document 2: more than one YAML document with no --- line between them: yaml: line 10: did not find expected <document start>"}},
		{"json", strings.Replace(jsonStream, "}\n{", "}\n{\"kind\": }\n{", 1),
			[]string{"in:7: document 2: invalid character '}' looking for beginning of value (line 7); the objects after it are not read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Set
			s.Read("in", []byte(tc.data))
			var errs []string
			for _, e := range s.Errors {
				errs = append(errs, e.Error())
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("errors:\n%s\nwant %d", strings.Join(errs, "\n"), len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(errs[i], w) {
					t.Errorf("error %q, want it to begin %q", errs[i], w)
				}
			}
			if tc.name != "json" { // a JSON stream cannot be read past a broken object
				if got := refs(&s); !slices.Equal(got, bothImages) {
					t.Errorf("images %q, want %q", got, bothImages)
				}
			}
		})
	}
}

// TestCutAsKubectl: the objects read from a stream are those kubectl reads
// (k8s.io/apimachinery's YAMLOrJSONDecoder, which kubectl apply uses), in
// the same order, whatever separates them.
func TestCutAsKubectl(t *testing.T) {
	kinds, err := os.ReadFile("testdata/kinds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile("testdata/chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"kinds":             string(kinds),
		"chart":             string(chart),
		"chart crlf":        strings.ReplaceAll(string(chart), "\n", "\r\n"),
		"two":               twoDeployments,
		"leading separator": "---\n" + twoDeployments,
		"comments":          "# a\n--- # b\n" + strings.Replace(twoDeployments, "---", "---   # c", 1) + "---\n---\n# d\n",
		"json":              jsonStream,
		"json then yaml":    `{"kind": "Pod", "metadata": {"name": "p"}}` + "\n---\n" + twoDeployments,
		"no final newline":  strings.TrimSuffix(twoDeployments, "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			var want []string
			dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
			for {
				var v any
				err := dec.Decode(&v)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if v != nil {
					b, _ := json.Marshal(v)
					want = append(want, string(b))
				}
			}
			docs, errs := decodeStream([]byte(data))
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			var got []string
			for _, d := range docs {
				if d.err != nil || d.more != nil {
					t.Fatalf("document %d: %v %v", d.index, d.err, d.more)
				}
				if d.value != nil {
					b, _ := json.Marshal(d.value)
					got = append(got, string(b))
				}
			}
			if len(want) < 2 || !slices.Equal(got, want) {
				t.Errorf("objects:\n%s\nkubectl's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestLinesAnyText: a file of references is one still when Windows or
// PowerShell wrote it.
func TestLinesAnyText(t *testing.T) {
	list := "# what the release needs\r\nnginx:1.27\r\nregistry.example.com/app:2  # the app\r\n\r\nbusybox\r\n"
	want := []string{"docker.io/library/busybox:latest", "docker.io/library/nginx:1.27", "registry.example.com/app:2"}
	for name, data := range map[string][]byte{
		"crlf":      []byte(list),
		"utf-16le":  utf16Text(list, binary.LittleEndian),
		"utf-8 bom": append([]byte("\xef\xbb\xbf"), list...),
	} {
		var s Set
		s.Read("list.txt", data)
		if got := refs(&s); !slices.Equal(got, want) || len(s.Errors) != 0 {
			t.Errorf("%s: images %q, errors %v; want %q", name, got, s.Errors, want)
		}
		if len(s.Images()) == 3 {
			if u := s.Images()[2].Uses[0]; u.String() != "list.txt:3" {
				t.Errorf("%s: use %q, want list.txt:3", name, u)
			}
		}
	}
	var s Set
	s.Read("odd.txt", append(utf16Text("nginx", binary.LittleEndian), 'x'))
	if len(s.Errors) != 1 || !strings.HasPrefix(s.Errors[0].Error(), "odd.txt: UTF-16 text of an odd number of bytes") {
		t.Errorf("errors %v", s.Errors)
	}
}
