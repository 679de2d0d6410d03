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
	// Where the two decoders part, on purpose. K3s reads registries.yaml
	// with a YAML decoder and yaml keys, and so does Parse: keys in the case
	// they are written (another case is refused as unknown; the JSON path
	// folded case, taking Mirrors for mirrors, which K3s would have
	// ignored), and a scalar where a string goes kept as written (the JSON
	// path turned a password 0123 into "83", yes into "true", 1.0 into "1").
	// A null in the list of endpoints is left out rather than kept as an
	// empty endpoint, which HostsFiles refused.
	for _, c := range []struct {
		name, in string
		check    func(File, error) bool
	}{
		{"key case", "Mirrors:\n  a.io:\n    endpoint: [x.io]\n", func(_ File, err error) bool {
			return err != nil && strings.Contains(err.Error(), "field Mirrors not found")
		}},
		{"octal-looking password", "configs:\n  a.io:\n    auth:\n      password: 0123\n", func(f File, err error) bool {
			return err == nil && f.Configs["a.io"].Auth.Password == "0123"
		}},
		{"yes as a password", "configs:\n  a.io:\n    auth:\n      password: yes\n", func(f File, err error) bool {
			return err == nil && f.Configs["a.io"].Auth.Password == "yes"
		}},
		{"float-looking password", "configs:\n  a.io:\n    auth:\n      password: 1.0\n", func(f File, err error) bool {
			return err == nil && f.Configs["a.io"].Auth.Password == "1.0"
		}},
		{"null endpoint", "mirrors:\n  a.io:\n    endpoint: [~, x.io]\n", func(f File, err error) bool {
			return err == nil && reflect.DeepEqual(f.Mirrors["a.io"].Endpoints, []string{"x.io"})
		}},
	} {
		t.Run("differs/"+c.name, func(t *testing.T) {
			before, werr := parsedBefore([]byte(c.in))
			got, gerr := Parse("registries.yaml", []byte(c.in))
			if werr != nil || (gerr == nil && reflect.DeepEqual(normalise(got), normalise(before))) {
				t.Fatalf("the JSON path gave %+v, %v: no longer a difference", before, werr)
			}
			if !c.check(got, gerr) {
				t.Fatalf("now %+v, %v", got, gerr)
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
