package workload

import "testing"

const placed = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: gpu-agent, namespace: sys}
spec:
  template:
    spec:
      nodeSelector: {gpu: "yes"}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
                  - {key: retired, operator: DoesNotExist}
              - matchFields:
                  - {key: metadata.name, operator: In, values: [node-9]}
                matchExpressions:
                  - {key: zone, operator: NotIn, values: [b]}
      containers: [{name: agent, image: gpu-agent:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: pinned-here}
spec:
  nodeName: node-2
  containers: [{name: app, image: app:1}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: anywhere}
spec:
  template:
    spec:
      containers: [{name: web, image: web:1}]
`

// TestPlacement: a manifest's nodeName, nodeSelector and required node
// affinity are read with each use, and say which nodes it may run on.
func TestPlacement(t *testing.T) {
	var s Set
	s.Read("placed.yaml", []byte(placed))
	uses := map[string]Use{}
	for _, img := range s.Images() {
		uses[img.Ref] = img.Uses[0]
	}
	gpu, pod, web := uses["docker.io/library/gpu-agent:1"], uses["docker.io/library/app:1"], uses["docker.io/library/web:1"]
	if gpu.Placement == nil || pod.Placement == nil || web.Placement != nil {
		t.Fatalf("placements: gpu %+v, pod %+v, web %+v", gpu.Placement, pod.Placement, web.Placement)
	}
	amd := map[string]string{"gpu": "yes", "kubernetes.io/arch": "amd64"}
	for _, tc := range []struct {
		name   string
		use    Use
		node   string
		labels map[string]string
		want   bool
	}{
		{"selector and first term", gpu, "node-1", amd, true},
		{"no gpu label", gpu, "node-1", map[string]string{"kubernetes.io/arch": "amd64"}, false},
		{"gpu: no", gpu, "node-1", map[string]string{"gpu": "no", "kubernetes.io/arch": "amd64"}, false},
		{"retired: second term's NotIn holds", gpu, "node-1", map[string]string{"gpu": "yes", "kubernetes.io/arch": "amd64", "retired": "1"}, true},
		{"retired in zone b: no term holds", gpu, "node-1", map[string]string{"gpu": "yes", "kubernetes.io/arch": "s390x", "zone": "b"}, false},
		{"labels unknown", gpu, "node-1", nil, true},
		{"nodeName here", pod, "node-2", amd, true},
		{"nodeName elsewhere", pod, "node-1", amd, false},
		{"anywhere", web, "node-1", map[string]string{}, true},
	} {
		if got := tc.use.Placement.MayRunOn(tc.node, tc.labels); got != tc.want {
			t.Errorf("%s: MayRunOn %v, want %v", tc.name, got, tc.want)
		}
	}
}
