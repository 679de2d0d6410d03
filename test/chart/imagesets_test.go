package chart

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/holdfast-project/holdfast/internal/imageset"
	hfreport "github.com/holdfast-project/holdfast/internal/report"
)

// TestImageSets: by default the chart installs the ImageSet resource (its columns, its schema's bounds, its
// status subresource, every field of the status the leader writes), lets the reporters read the sets and
// write their status, gives them a Lease to elect the writer, and turns it all on in the reporter; with
// imageSets.enabled false none of it.
func TestImageSets(t *testing.T) {
	t.Parallel()
	r := render(t, nil)
	c, ok := r.crd(imageset.Resource + "." + hfreport.Group)
	if !ok {
		t.Fatalf("no ImageSet CustomResourceDefinition among %d", len(r.CRDs))
	}
	if c.Spec.Group != hfreport.Group || c.Spec.Scope != "Cluster" || c.Spec.Names.Kind != imageset.Kind ||
		len(c.Spec.Versions) != 1 || "/apis/"+c.Spec.Group+"/"+c.Spec.Versions[0].Name+"/"+c.Spec.Names.Plural != imageset.Path {
		t.Fatalf("ImageSet CustomResourceDefinition: %+v", c.Spec)
	}
	v := c.Spec.Versions[0]
	if !v.Served || !v.Storage {
		t.Errorf("version %s served %v storage %v", v.Name, v.Served, v.Storage)
	}
	if _, ok := v.Subresources["status"]; !ok {
		t.Errorf("subresources %v: no status (the leader writes it alone, kubectl wait reads it)", v.Subresources)
	}
	var cols []string
	for _, col := range v.AdditionalPrinterColumns {
		cols = append(cols, col.Name+"="+col.Type+":"+col.JSONPath)
	}
	want := []string{
		`Staged=string:.status.conditions[?(@.type=="Staged")].status`,
		"Nodes=integer:.status.nodes.selected",
		"Staged-Nodes=integer:.status.nodes.staged",
		"Failed=integer:.status.nodes.failed",
		"Missing=integer:.status.missingImages",
		"Age=date:.metadata.creationTimestamp",
	}
	if !slices.Equal(cols, want) {
		t.Errorf("printer columns %q, want %q", cols, want)
	}

	root := v.Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	images := spec.Properties["images"]
	if !slices.Contains(root.Required, "spec") || !slices.Contains(spec.Required, "images") || images.Type != "array" ||
		images.Items == nil || images.Items.Type != "string" || images.MinItems == nil || *images.MinItems != 1 ||
		images.MaxItems == nil || *images.MaxItems != hfreport.MaxSetImages {
		t.Errorf("spec.images: %+v (spec required %v), want 1 to %d strings, required", images, spec.Required, hfreport.MaxSetImages)
	}
	if sel := spec.Properties["nodeSelector"]; sel.Type != "object" || sel.AdditionalProperties == nil || sel.AdditionalProperties.Type != "string" {
		t.Errorf("spec.nodeSelector: %+v, want a map of strings", sel)
	}
	if mc := spec.Properties["maxConcurrent"]; mc.Type != "integer" || mc.Minimum == nil || *mc.Minimum != 0 {
		t.Errorf("spec.maxConcurrent: %+v, want an integer ≥ 0", mc)
	}
	// The API server prunes what the schema does not name: every field the leader and the agents write.
	for _, f := range unschemed(reflect.TypeFor[imageset.ImageSet](), root, "") {
		t.Errorf("ImageSet field %s is not in the CustomResourceDefinition's schema: the API server drops it", f)
	}
	// Every field a reporter writes into NodeImages (the sets, the peer mirror the waves send others to).
	ni, _ := r.crd("nodeimages." + hfreport.Group)
	for _, f := range unschemed(reflect.TypeFor[hfreport.NodeImages](), ni.Spec.Versions[0].Schema.OpenAPIV3Schema, "") {
		t.Errorf("NodeImages field %s is not in the CustomResourceDefinition's schema: the API server drops it", f)
	}

	checkRBAC(t, r, reporterRules(true, true, true))
	if len(r.Roles) != 1 || len(r.RoleBindings) != 1 {
		t.Fatalf("%d Roles and %d RoleBindings, want one each (the Lease)", len(r.Roles), len(r.RoleBindings))
	}
	role, rb := r.Roles[0], r.RoleBindings[0]
	wantRule := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}
	if role.Namespace != namespace || len(role.Rules) != 1 || !reflect.DeepEqual(role.Rules[0], wantRule) {
		t.Errorf("Role %s/%s rules %+v, want only %+v", role.Namespace, role.Name, role.Rules, wantRule)
	}
	if rb.Namespace != namespace || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Name != fullname || rb.Subjects[0].Namespace != namespace {
		t.Errorf("RoleBinding %+v", rb)
	}

	rep := container(t, r.daemonSet(t), "reporter")
	for name, want := range map[string]string{"HOLDFAST_IMAGESETS": "true", "HOLDFAST_LEADER_ELECT": "true", "HOLDFAST_LEASE_NAME": fullname + "-imagesets"} {
		if got, _ := env(rep, name); got != want {
			t.Errorf("reporter %s=%q, want %q", name, got, want)
		}
	}
	if e := envVar(rep, "POD_NAMESPACE"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("reporter POD_NAMESPACE %+v, want the pod's namespace (the Lease's)", e)
	}

	off := render(t, map[string]any{"imageSets": map[string]any{"enabled": false}})
	if _, ok := off.crd(imageset.Resource + "." + hfreport.Group); ok || len(off.CRDs) != 1 {
		t.Errorf("imageSets off: %d CustomResourceDefinitions, want the NodeImages one only", len(off.CRDs))
	}
	checkRBAC(t, off, reporterRules(true, true, false))
	if len(off.Roles)+len(off.RoleBindings) != 0 {
		t.Errorf("imageSets off: %d Roles, %d RoleBindings", len(off.Roles), len(off.RoleBindings))
	}
	for _, name := range []string{"HOLDFAST_IMAGESETS", "HOLDFAST_LEADER_ELECT", "HOLDFAST_LEASE_NAME", "POD_NAMESPACE"} {
		if e := envVar(container(t, off.daemonSet(t), "reporter"), name); e != nil {
			t.Errorf("imageSets off: reporter %s set: %+v", name, e)
		}
	}
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}
