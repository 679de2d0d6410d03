package kubeapi

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// target is what a REST path names: a resource (in a namespace or not),
// one object of it when name is set, and a list's selectors.
type target struct {
	resource  schema.GroupVersionResource
	namespace string
	name      string
	list      metav1.ListOptions
}

// parsePath reads /api/VERSION/… (the core group) or
// /apis/GROUP/VERSION/…, then RESOURCE[/NAME] or
// namespaces/NS/RESOURCE[/NAME], and a query of labelSelector and
// fieldSelector.
func parsePath(path string) (target, error) {
	var t target
	u, err := url.Parse(path)
	if err != nil {
		return t, fmt.Errorf("GET %s: %w", path, err)
	}
	seg := strings.Split(strings.Trim(u.Path, "/"), "/")
	if slices.Contains(seg, "") {
		return t, fmt.Errorf("GET %s: an empty segment", path)
	}
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		t.resource.Version, seg = seg[1], seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		t.resource.Group, t.resource.Version, seg = seg[1], seg[2], seg[3:]
	default:
		return t, fmt.Errorf("GET %s: not a path to a resource (/api/VERSION/… or /apis/GROUP/VERSION/…)", path)
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		t.namespace, seg = seg[1], seg[2:]
	}
	switch len(seg) {
	case 1:
		t.resource.Resource = seg[0]
	case 2:
		t.resource.Resource, t.name = seg[0], seg[1]
	default:
		return t, fmt.Errorf("GET %s: a subresource or a path too long", path)
	}
	for key, values := range u.Query() {
		switch key {
		case "labelSelector":
			t.list.LabelSelector = values[0]
		case "fieldSelector":
			t.list.FieldSelector = values[0]
		default:
			return t, fmt.Errorf("GET %s: query %q is not supported (labelSelector, fieldSelector)", path, key)
		}
	}
	return t, nil
}
