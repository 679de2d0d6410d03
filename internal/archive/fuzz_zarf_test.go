package archive

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzZarfYAML: any zarf.yaml is parsed without a panic, and every name it
// is taken to want is a normalised reference: normalised again, the same.
func FuzzZarfYAML(f *testing.F) {
	f.Add([]byte("kind: ZarfPackageConfig\nmetadata:\n  name: demo\n  aggregateChecksum: abc\ncomponents:\n- name: app\n  images:\n  - nginx:1.25\n  - registry.example.com/team/app@sha256:" +
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n  imageArchives:\n  - images: [busybox]\n"))
	f.Add([]byte("components: [{name: x, images: [\"Not A Name\"]}]"))
	f.Add([]byte("components: {}"))
	f.Add([]byte("- [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pkg zarfPackage
		if err := yaml.Unmarshal(data, &pkg); err != nil {
			return
		}
		wanted, err := pkg.wanted()
		if err != nil {
			return
		}
		for name := range wanted {
			if again, err := normalizeName(name); err != nil || again != name {
				t.Errorf("wanted %q normalises again to %q (%v)", name, again, err)
			}
		}
	})
}
