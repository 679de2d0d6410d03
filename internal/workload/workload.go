// Package workload reads the images Kubernetes workloads could run from
// their manifests: multi-document YAML or JSON as kubectl, helm template or
// kubectl get -o yaml write them, Lists included, or plain lines of image
// references. It reads what each pod template names (containers, init
// containers, ephemeral containers, image volumes) and nothing else; it
// never talks to a cluster.
package workload

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"

	"github.com/holdfast-project/holdfast/internal/pattern"
)

// Use is one place a manifest names an image.
type Use struct {
	File      string // as given ("-" for standard input)
	Doc       int    // the document's index in the file, from 1; 0 for a line of references
	Line      int    // for a line of references; 0 with Doc 0: File alone names the use (the sandbox image)
	Kind      string // the object's kind: Deployment, Pod, …
	Namespace string
	Name      string
	Container string // "initContainers/setup", "containers/app"; "volumes/models" for an image volume
	// Found says how a pod template was found in an object holdfast does
	// not know: the path to it ("spec.template.spec"); empty for known kinds.
	Found string
	// Placement is where the pod may run; nil: anywhere.
	Placement *Placement
	// Image is the reference as written. PullPolicy is the container's
	// imagePullPolicy or the image volume's pullPolicy, defaulted as the API
	// server defaults it (DefaultPullPolicy), that default for a line of
	// references, and empty for the sandbox image (the CRI pulls it).
	Image      string
	PullPolicy string
	// PullSecrets are the names of the pod spec's imagePullSecrets (not
	// those its service account adds, which a manifest does not say).
	PullSecrets []string
}

// DefaultPullPolicy is the pull policy the API server gives a container or
// an image volume that names ref without one: Always for a :latest tag or
// no tag and no digest, else IfNotPresent; empty when ref does not parse.
func DefaultPullPolicy(ref string) string {
	n, err := reference.ParseNormalizedNamed(strings.TrimSpace(ref))
	if err != nil {
		return ""
	}
	tagged, hasTag := n.(reference.Tagged)
	_, hasDigest := n.(reference.Digested)
	if (hasTag && tagged.Tag() == "latest") || (!hasTag && !hasDigest) {
		return "Always"
	}
	return "IfNotPresent"
}

// pullPolicy is policy as written, else ref's default.
func pullPolicy(policy any, ref string) string {
	if s, _ := policy.(string); s != "" {
		return s
	}
	return DefaultPullPolicy(ref)
}

// String names the use for a person: "app.yaml#2 Deployment web/api
// containers/app", "list.txt:3", or File alone.
func (u Use) String() string {
	if u.Doc == 0 && u.Line == 0 {
		return u.File
	}
	if u.Doc == 0 {
		return fmt.Sprintf("%s:%d", u.File, u.Line)
	}
	obj := u.Name
	if u.Namespace != "" {
		obj = u.Namespace + "/" + u.Name
	}
	return strings.TrimSpace(fmt.Sprintf("%s#%d %s %s %s", u.File, u.Doc, u.Kind, obj, u.Container))
}

// Image is an image the manifests name, and where.
type Image struct {
	Ref  string // normalised as the kubelet asks for it: docker.io/library/nginx:latest
	Uses []Use
}

// UsedBy says who uses img, a line for each use.
func (img Image) UsedBy() []string {
	out := make([]string, len(img.Uses))
	for i, u := range img.Uses {
		out[i] = u.String()
	}
	return out
}

// Set gathers the images of several manifests.
type Set struct {
	byRef map[string]*Image
	// Errors are the documents and lines that could not be read, each
	// naming the file and the document's index or the line.
	Errors []error
	// Notes say where a pod template was found in an object of a kind
	// holdfast does not know (best effort).
	Notes []string
}

// Images lists the images, sorted by reference.
func (s *Set) Images() []Image {
	out := make([]Image, 0, len(s.byRef))
	for _, img := range s.byRef {
		out = append(out, *img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// Add records that u names ref (as written); a reference that does not
// parse is an error naming u.
func (s *Set) Add(ref string, u Use) {
	full, err := pattern.NormalizeRef(strings.TrimSpace(ref))
	if err != nil {
		s.Errors = append(s.Errors, fmt.Errorf("%s: image %w", u, err))
		return
	}
	if s.byRef == nil {
		s.byRef = map[string]*Image{}
	}
	img, ok := s.byRef[full]
	if !ok {
		img = &Image{Ref: full}
		s.byRef[full] = img
	}
	img.Uses = append(img.Uses, u)
}

// ReadFiles reads each file ("-": in, standard input) into a new set with
// Read. A file that cannot be read is an error of the set's input; the others
// are still read.
func ReadFiles(files []string, in io.Reader) *Set {
	var set Set
	for _, f := range files {
		var data []byte
		var err error
		if f == "-" {
			if data, err = io.ReadAll(in); err != nil {
				err = fmt.Errorf("reading standard input: %w", err)
			}
		} else if data, err = os.ReadFile(f); err != nil {
			err = fmt.Errorf("reading %s: %w", f, err)
		}
		if err != nil {
			set.Errors = append(set.Errors, err)
			continue
		}
		set.Read(f, data)
	}
	return &set
}

// Read reads one file of manifests, or of references a line each, into s,
// as decodeStream cuts it (stream.go). A document that is not understood is
// an error naming the file, the line it begins at and its index
// ("app.yaml:12: document 3: …"); the other documents are still read.
func (s *Set) Read(file string, data []byte) {
	data, err := utf8Text(data)
	if err != nil {
		s.Errors = append(s.Errors, fmt.Errorf("%s: %w", file, err))
		return
	}
	docs, sepErrs := decodeStream(data)
	if len(sepErrs) == 0 && refLines(docs) {
		s.readLines(file, data)
		return
	}
	for _, e := range sepErrs {
		s.Errors = append(s.Errors, fmt.Errorf("%s:%d: %w", file, e.line, e.err))
	}
	for _, d := range docs {
		fail := func(err error) {
			s.Errors = append(s.Errors, fmt.Errorf("%s:%d: document %d: %w", file, d.line, d.index, err))
		}
		switch {
		case d.err != nil:
			fail(d.err)
			continue
		case d.more != nil:
			fail(d.more)
		}
		if d.value == nil {
			continue // an empty document, or comments only
		}
		obj, ok := d.value.(map[string]any)
		if !ok {
			fail(fmt.Errorf("not a Kubernetes object (%s)", what(d.value)))
			continue
		}
		s.object(obj, Use{File: file, Doc: d.index}, d.line)
	}
}

// what names the kind of a decoded value for an error.
func what(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// refLines says whether the input is lines of references: every document
// parses, none is a mapping or a sequence, and one is a string.
func refLines(docs []document) bool {
	content := false
	for _, d := range docs {
		if d.err != nil {
			return false
		}
		switch d.value.(type) {
		case nil:
		case string:
			content = true
		default:
			return false
		}
	}
	return content
}

func (s *Set) readLines(file string, data []byte) {
	for i, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" || line == "---" {
			continue
		}
		s.Add(line, Use{File: file, Line: i + 1, Image: line, PullPolicy: DefaultPullPolicy(line)})
	}
}

// podSpecPaths are where the known kinds keep their pod spec.
var podSpecPaths = map[string][]string{
	"Pod":                   {"spec"},
	"PodTemplate":           {"template", "spec"},
	"Deployment":            {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

// containerLists are the lists of containers a pod spec has.
var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

// object reads one object: a List's items, a known kind's pod spec, or any
// other object's pod templates wherever they are. An object without a kind
// is an error naming the document and the line it begins at; so is a
// List's item that is not an object with a kind.
func (s *Set) object(obj map[string]any, u Use, line int) {
	kind, _ := obj["kind"].(string)
	if kind == "" {
		s.Errors = append(s.Errors, fmt.Errorf("%s:%d: document %d: not a Kubernetes object: no kind", u.File, line, u.Doc))
		return
	}
	if items, ok := obj["items"].([]any); ok && (kind == "List" || strings.HasSuffix(kind, "List")) {
		for i, it := range items {
			m, ok := it.(map[string]any)
			if k, _ := m["kind"].(string); !ok || k == "" {
				// A typed list as the API server writes it (DeploymentList,
				// from kubectl get --raw) leaves its items' kind out.
				if ok && kind != "List" {
					m["kind"] = strings.TrimSuffix(kind, "List")
				} else {
					s.Errors = append(s.Errors, fmt.Errorf("%s:%d: document %d: %s items[%d]: not a Kubernetes object", u.File, line, u.Doc, kind, i))
					continue
				}
			}
			s.object(m, u, line)
		}
		return
	}
	u.Kind = kind
	if md, ok := obj["metadata"].(map[string]any); ok {
		u.Name, _ = md["name"].(string)
		u.Namespace, _ = md["namespace"].(string)
	}
	if path, ok := podSpecPaths[kind]; ok {
		if spec, ok := dig(obj, path); ok {
			s.podSpec(spec, u)
		}
		return
	}
	// Another kind (an operator's resource, an Argo Rollout): any pod spec
	// in it, best effort.
	s.search(obj, nil, u)
}

// search finds pod specs (a map with a list of containers that name
// images) under v; path is where v is.
func (s *Set) search(v any, path []string, u Use) {
	switch x := v.(type) {
	case map[string]any:
		if isPodSpec(x) {
			u.Found = strings.Join(path, ".")
			s.Notes = append(s.Notes, fmt.Sprintf("%s: a pod spec at %s", u, u.Found))
			s.podSpec(x, u)
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s.search(x[k], append(slices.Clone(path), k), u)
		}
	case []any:
		for i, e := range x {
			s.search(e, append(slices.Clone(path), fmt.Sprint(i)), u)
		}
	}
}

func isPodSpec(m map[string]any) bool {
	cs, ok := m["containers"].([]any)
	if !ok || len(cs) == 0 {
		return false
	}
	for _, c := range cs {
		cm, ok := c.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := cm["image"].(string); !ok {
			return false
		}
	}
	return true
}

func (s *Set) podSpec(spec map[string]any, u Use) {
	u.Placement = placementOf(spec)
	u.PullSecrets = pullSecrets(spec)
	for _, list := range containerLists {
		cs, _ := spec[list].([]any)
		for _, c := range cs {
			cm, ok := c.(map[string]any)
			if !ok {
				continue
			}
			img, _ := cm["image"].(string)
			name, _ := cm["name"].(string)
			cu := u
			cu.Container = list + "/" + name
			cu.Image, cu.PullPolicy = img, pullPolicy(cm["imagePullPolicy"], img)
			if img == "" {
				s.Errors = append(s.Errors, fmt.Errorf("%s: no image", cu))
				continue
			}
			s.Add(img, cu)
		}
	}
	// An image volume (GA in Kubernetes 1.36): the kubelet pulls its
	// reference as it pulls a container's image, before the pod starts.
	vols, _ := spec["volumes"].([]any)
	for _, v := range vols {
		vm, _ := v.(map[string]any)
		src, ok := vm["image"].(map[string]any)
		if !ok {
			continue
		}
		name, _ := vm["name"].(string)
		ref, _ := src["reference"].(string)
		vu := u
		vu.Container = "volumes/" + name
		vu.Image, vu.PullPolicy = ref, pullPolicy(src["pullPolicy"], ref)
		if ref == "" {
			s.Errors = append(s.Errors, fmt.Errorf("%s: no image reference", vu))
			continue
		}
		s.Add(ref, vu)
	}
}

// pullSecrets are the names of a pod spec's imagePullSecrets, nil for none.
func pullSecrets(spec map[string]any) []string {
	list, _ := spec["imagePullSecrets"].([]any)
	var out []string
	for _, e := range list {
		m, _ := e.(map[string]any)
		if name, _ := m["name"].(string); name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// dig walks path through nested maps.
func dig(m map[string]any, path []string) (map[string]any, bool) {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}
