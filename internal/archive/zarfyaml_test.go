package archive

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	k8syaml "sigs.k8s.io/yaml"
)

// TestZarfYAMLAsBefore: zarf.yaml, as Zarf writes it, reads the same with
// go.yaml.in/yaml/v3 as it did through JSON (sigs.k8s.io/yaml): the names,
// the images of components and image archives, the aggregate checksum;
// what one refuses the other refuses. Where they part, on purpose (none of
// it in what Zarf writes): a key in another case is left aside (the JSON
// path folded case), a key given twice is refused (the JSON path took the
// last), a null among a component's images is left out (the JSON path kept
// an empty name, which wanted refused).
func TestZarfYAMLAsBefore(t *testing.T) {
	inputs := map[string]string{
		"zarf v0.4x": `kind: ZarfPackageConfig
metadata:
  name: demo
  description: images for the demo
  version: 1.0.0
  architecture: amd64
  aggregateChecksum: 7b4e0d1b7a1c0d2a1f53b0c6a5d0e0c1b7a2e9f1d5c3b6a8e7f4d2c1b0a9e8f7
build:
  terminal: builder
  user: ci
  architecture: amd64
  timestamp: Mon, 01 Jan 2024 00:00:00 +0000
  version: v0.42.0
  migrations:
    - scripts-to-actions
  signed: true
components:
  - name: app
    required: true
    manifests:
      - name: config
        namespace: demo
        files: [config.yaml]
    images:
      - nginx:1.25
      - registry.example.com/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  - name: archived
    imageArchives:
      - path: images.tar
        images: [busybox, "registry.example.com/tools/cli:2"]
`,
		"json style": `{"kind":"ZarfPackageConfig","metadata":{"name":"x","aggregateChecksum":"abc"},"components":[{"name":"a","images":["redis:7"]}]}`,
		"seed":       "kind: ZarfPackageConfig\nmetadata:\n  name: demo\n  aggregateChecksum: abc\ncomponents:\n- name: app\n  images:\n  - nginx:1.25\n  imageArchives:\n  - images: [busybox]\n",
		"not a name": "components: [{name: x, images: [\"Not A Name\"]}]",
		"bad shape":  "components: {}",
		"syntax":     "- [\n",
		"empty":      "",
		"number":     "metadata: {name: 1, aggregateChecksum: 12}\ncomponents: [{name: 2, images: [3]}]\n",
		"two docs":   "metadata: {name: a}\n---\nmetadata: {name: b}\n",
		"anchor":     "components:\n  - &c {name: a, images: [x]}\n  - *c\n",
		"null parts": "metadata:\ncomponents:\n  - name: a\n    images:\n",
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			var before, now zarfPackage
			berr := k8syaml.Unmarshal([]byte(in), &before)
			nerr := yaml.Unmarshal([]byte(in), &now)
			if (berr == nil) != (nerr == nil) {
				t.Fatalf("before: %v; now: %v", berr, nerr)
			}
			if nerr == nil && !reflect.DeepEqual(normalZarf(before), normalZarf(now)) {
				t.Fatalf("before %+v\nnow    %+v", before, now)
			}
		})
	}
	var p zarfPackage
	if err := yaml.Unmarshal([]byte("Metadata: {Name: x}\n"), &p); err != nil || p.Metadata.Name != "" {
		t.Errorf("a key in another case: %+v, %v; want it left aside", p, err)
	}
	twice := []byte("metadata: {name: a}\nmetadata: {name: b}\n")
	if err := k8syaml.Unmarshal(twice, &p); err != nil {
		t.Errorf("the JSON path refuses a key given twice: %v; no longer a difference", err)
	}
	if err := yaml.Unmarshal(twice, &p); err == nil || !strings.Contains(err.Error(), `mapping key "metadata" already defined`) {
		t.Errorf("a key given twice: %v, want it refused", err)
	}
	var n zarfPackage
	if err := yaml.Unmarshal([]byte("components: [{name: a, images: [~, nginx]}]\n"), &n); err != nil || !reflect.DeepEqual(n.Components[0].Images, []string{"nginx"}) {
		t.Errorf("a null image: %+v, %v; want it left out", n, err)
	}
}

// normalZarf makes empty lists nil, which the two decoders leave apart.
func normalZarf(p zarfPackage) zarfPackage {
	if len(p.Components) == 0 {
		p.Components = nil
	}
	for i := range p.Components {
		c := &p.Components[i]
		if len(c.Images) == 0 {
			c.Images = nil
		}
		if len(c.ImageArchives) == 0 {
			c.ImageArchives = nil
		}
		for j := range c.ImageArchives {
			if len(c.ImageArchives[j].Images) == 0 {
				c.ImageArchives[j].Images = nil
			}
		}
	}
	return p
}
