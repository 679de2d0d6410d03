package registries

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	k8syaml "sigs.k8s.io/yaml"
)

// parsedBefore is how a registries.yaml was read before Parse decoded it
// with go.yaml.in/yaml/v3: YAML to JSON, then encoding/json, unknown
// fields refused (sigs.k8s.io/yaml's UnmarshalStrict).
func parsedBefore(data []byte) (File, error) {
	var f File
	err := k8syaml.UnmarshalStrict(data, &f)
	return f, err
}

// TestParseAsBefore: Parse reads what real registries.yaml files hold (the
// docs' sample, K3s's own examples, the fuzz seeds) exactly as the
// JSON-based decoder did, and refuses what it refused; where the two differ
// the case says which way and why.
func TestParseAsBefore(t *testing.T) {
	inputs := map[string]string{
		"sample":        sample,
		"crlf":          strings.ReplaceAll(sample, "\n", "\r\n"),
		"empty":         "",
		"comments only": "# nothing yet\n",
		"empty doc":     "---\n",
		"null":          "null\n",
		"flow":          `{"mirrors": {"docker.io": {"endpoint": ["https://m.example"]}}}`,
		"catchall":      "mirrors:\n  \"*\":\n    endpoint: [\"http://127.0.0.1:5000\"]\n",
		"token":         "configs:\n  ghcr.io:\n    auth:\n      auth: " + base64.StdEncoding.EncodeToString([]byte("u:tok:en")) + "\n",
		"rewrite":       "mirrors:\n  docker.io:\n    endpoint: [a.io]\n    rewrite:\n      \"^(.*)$\": \"lib/$1\"\n",
		"tls bool":      "configs:\n  a.io:\n    tls:\n      insecure_skip_verify: false\n",
		"unknown top":   "mirrors: {}\nextra: 1\n",
		"unknown deep":  "configs:\n  a.io:\n    tls:\n      insecure: true\n",
		"not a map":     "- mirrors\n",
		"endpoint str":  "mirrors:\n  a.io:\n    endpoint: https://m.example\n",
		"bool as str":   "configs:\n  a.io:\n    tls:\n      insecure_skip_verify: \"true\"\n",
		"syntax":        "mirrors:\n  a.io: [\n",
		"duplicate key": "mirrors: {}\nmirrors: {}\n",
		"anchors":       "mirrors:\n  a.io: &m\n    endpoint: [x.io]\n  b.io: *m\n",
		"two docs":      "mirrors: {}\n---\nconfigs: {}\n",
		"number string": "configs:\n  a.io:\n    auth:\n      password: 12345\n",
		"yes":           "configs:\n  a.io:\n    tls:\n      insecure_skip_verify: yes\n",
	}
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzRegistries/*")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := corpusBytes(string(data)); ok {
			inputs["seed "+filepath.Base(s)] = v
		}
	}
	// Where the two decoders part, on purpose: K3s reads registries.yaml
	// with a YAML decoder and yaml keys, in the case they are written, and
	// so does Parse, which refuses a key in another case as unknown; the
	// JSON path took a key in any case (Mirrors for mirrors), which K3s
	// would have ignored.
	differ := map[string]string{
		"key case": "Mirrors:\n  a.io:\n    endpoint: [x.io]\n",
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			want, werr := parsedBefore([]byte(in))
			got, gerr := Parse("registries.yaml", []byte(in))
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("before: %v; now: %v", werr, gerr)
			}
			if gerr == nil && !reflect.DeepEqual(normalise(got), normalise(want)) {
				t.Fatalf("before %+v, now %+v", want, got)
			}
			if gerr != nil && !strings.HasPrefix(gerr.Error(), "parsing registries.yaml: ") {
				t.Fatalf("error %q does not name the file", gerr)
			}
		})
	}
	for name, in := range differ {
		t.Run("differs/"+name, func(t *testing.T) {
			_, werr := parsedBefore([]byte(in))
			_, gerr := Parse("registries.yaml", []byte(in))
			if werr != nil || gerr == nil || !strings.Contains(gerr.Error(), "field Mirrors not found") {
				t.Fatalf("before: %v; now: %v, want it refused naming the key", werr, gerr)
			}
		})
	}
}

// corpusBytes reads the one []byte value of a go test fuzz v1 corpus file.
func corpusBytes(file string) (string, bool) {
	lines := strings.SplitN(file, "\n", 3)
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "[]byte(") {
		return "", false
	}
	s := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
	v, err := strconv.Unquote(s)
	return v, err == nil
}
