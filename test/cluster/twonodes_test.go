package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/holdfast-project/holdfast/internal/report"
)

// imgPeer: a workload on node 2 needs it; only node 1 gets its archive. peerRegistry is its registry, which
// the chart's spegels share; peerRegistryPort the chart's default spegel registry port.
const (
	imgPeer          = peerRegistry + "/peer:1"
	peerRegistry     = "holdfast.test"
	peerRegistryPort = 30020
)

// TestTwoNodes: the chart on a cluster of two nodes on this machine, with peers.enabled: spegel (K3s's build,
// in holdfast's image) beside holdfast's agent in each pod, finding the other through the cluster's DNS, and
// --pull-required. The DaemonSet runs on both nodes; each spegel serves its node's containerd at the node's
// address (hostPort) and has found the other; each node has its own NodeImages and condition, and check --cluster
// tells them apart; a reporter cannot write the other node's NodeImages; and an archive dropped into node 1's
// images dir ends pinned on node 2, which a workload there needs, pulled from node 1 through the two spegels, so
// that its pod starts without any registry.
func TestTwoNodes(t *testing.T) {
	c := needCluster(t)
	top := t // what the steps start lasts until the test ends
	n, err := c.addNode2()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.stop(); err != nil {
			t.Errorf("stopping node 2: %v", err)
		}
	})
	s := &scenario{c: c}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"node-2-joins", func(t *testing.T) { nodeJoins(t, n) }},
		{"daemonset-on-both-nodes", func(t *testing.T) { s.installOnTwo(t, top, n) }},
		{"spegels-serve-and-find-each-other", func(t *testing.T) { s.spegelsReady(t) }},
		{"each-node-its-own-report", func(t *testing.T) { s.reportsApart(t) }},
		{"reporter-writes-only-its-own-nodeimages", func(t *testing.T) { s.ownNodeImagesOnly(t) }},
		{"archive-on-node-1-pinned-on-node-2", func(t *testing.T) { s.pulledFromPeer(t, n) }},
		{"imageset-missing-everywhere", func(t *testing.T) { s.imageSetMissingEverywhere(t) }},
		{"imageset-staged-then-released", func(t *testing.T) { s.imageSetStaged(t, n) }},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			t.Fatalf("step %s failed; the steps after it build on it", st.name)
		}
	}
}

// nodeJoins: node 2 is Ready at its own address, the pause image pinned in its own containerd, and a pod on
// it runs with an address of its own pod range.
func nodeJoins(t *testing.T, n *node2) {
	c := n.c
	ctx := context.Background()
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	for _, node := range nodes.Items {
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				addrs[node.Name] = a.Address
			}
		}
	}
	if len(addrs) != 2 || addrs[nodeName] != nodeIP || addrs[node2Name] != node2IP {
		t.Fatalf("nodes and their addresses: %v, want %s at %s and %s at %s", addrs, nodeName, nodeIP, node2Name, node2IP)
	}
	if pinned, found, err := criImageVia(n.crictl, pauseImage); err != nil || !found || !pinned {
		t.Errorf("the pause image on node 2: found %v, pinned %v (%v)", found, pinned, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-node-2", Namespace: workloadNS},
		Spec: corev1.PodSpec{NodeName: node2Name, Containers: []corev1.Container{{
			Name: "pause", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	if _, err := c.client.CoreV1().Pods(workloadNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer deletePod(c, pod.Name)
	_, cidr, _ := net.ParseCIDR(node2PodCIDR)
	if err := waitFor("a pod on node 2 running", 2*time.Minute, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(workloadNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ip := net.ParseIP(p.Status.PodIP); p.Status.Phase != corev1.PodRunning || ip == nil || !cidr.Contains(ip) {
			return false, fmt.Errorf("phase %s, pod IP %q, want running in %s", p.Status.Phase, p.Status.PodIP, node2PodCIDR)
		}
		return true, nil
	}, n.procs["node2 kubelet"]); err != nil {
		t.Fatal(err)
	}
}

func deletePod(c *cluster, name string) {
	zero := int64(0)
	_ = c.client.CoreV1().Pods(workloadNS).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// installOnTwo imports holdfast's own image on both nodes and installs the chart (until top ends) with
// peers.enabled, sharing the holdfast.test registry (no such registry exists: only a peer can serve it): the
// DaemonSet runs a Ready pod on each node.
func (s *scenario) installOnTwo(t, top *testing.T, n *node2) {
	c := s.c
	s.bootstrap(t)
	own := filepath.Join(c.imagesDir, "holdfast-image.tar")
	if err := copyFile(own, filepath.Join(n.path(c.imagesDir), "holdfast-image.tar")); err != nil {
		t.Fatal(err)
	}
	if out, err := n.holdfast("sync", "--images", n.path(c.imagesDir)); err != nil {
		t.Fatalf("holdfast sync on node 2: %v\n%s", err, out)
	}
	s.helm = findHelm(t, c.repoBin)
	s.chart = filepath.Join(repoRoot(), "deploy", "helm", "holdfast")
	helmHome := filepath.Join(c.dir, "helm")
	s.helmEnv = append(c.env(), "KUBECONFIG="+c.admin,
		"HELM_CACHE_HOME="+helmHome+"/cache", "HELM_CONFIG_HOME="+helmHome+"/config", "HELM_DATA_HOME="+helmHome+"/data")
	s.dataDir = filepath.Join(c.dir, "holdfast-data")
	values := s.values(t, []string{}, map[string]any{
		"peers":    map[string]any{"enabled": true, "registries": []string{peerRegistry}},
		"extraEnv": []map[string]string{{"name": "HOLDFAST_SETTLE", "value": "500ms"}, {"name": "HOLDFAST_PEER_GRACE", "value": testPeerGrace.String()}},
	})
	if out, err := s.runHelm("install", release, s.chart, "--namespace", chartNS, "--create-namespace", "--values", values); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	s.installed = true
	top.Cleanup(func() {
		if out, err := s.runHelm("uninstall", release, "--namespace", chartNS, "--wait", "--timeout", "2m"); err != nil {
			top.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	if err := waitFor("the DaemonSet Ready on both nodes", 3*time.Minute, func() (bool, error) {
		on := map[string]bool{}
		pods, err := c.client.CoreV1().Pods(chartNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var why []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if podReady(p) {
				on[p.Spec.NodeName] = true
			} else {
				why = append(why, p.Name+" on "+p.Spec.NodeName+": "+string(p.Status.Phase)+" "+podProblems(p))
			}
		}
		return on[nodeName] && on[node2Name], fmt.Errorf("ready on %v; %s", on, strings.Join(why, "; "))
	}); err != nil {
		t.Fatalf("%v\n%s", err, s.agentLogs())
	}
}

// spegelsReady: each node's spegel answers at the node's address on the registry port (the hostPort the
// node's containerd uses, through CNI's portmap) and is ready, which spegel is once it has a peer: the two found
// each other through the peers Service's DNS name.
func (s *scenario) spegelsReady(t *testing.T) {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, ip := range []string{nodeIP, node2IP} {
		url := fmt.Sprintf("http://%s:%d/readyz", ip, peerRegistryPort)
		if err := waitFor("spegel ready at "+url, 2*time.Minute, func() (bool, error) {
			resp, err := client.Get(url)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: %s", url, resp.Status)
		}); err != nil {
			t.Errorf("%v\n%s", err, s.containerLogs(t, "spegel", 20))
		}
	}
}

// reportsApart: each node has its own NodeImages (owned by its Node) and HoldfastImagesReady condition, and
// check --cluster lists both, ready.
func (s *scenario) reportsApart(t *testing.T) {
	c := s.c
	for _, name := range []string{nodeName, node2Name} {
		if err := waitFor("NodeImages "+name, time.Minute, func() (bool, error) {
			raw, err := c.client.CoreV1().RESTClient().Get().AbsPath(report.NodeImagesPath, name).DoRaw(context.Background())
			if err != nil {
				return false, err
			}
			var ni report.NodeImages
			if err := json.Unmarshal(raw, &ni); err != nil {
				return false, err
			}
			owners := ni.Metadata.OwnerReferences
			if len(owners) != 1 || owners[0].Name != name || ni.Images == 0 {
				return false, fmt.Errorf("NodeImages %s: owners %+v, %d images", name, owners, ni.Images)
			}
			return true, nil
		}); err != nil {
			t.Error(err)
		}
		if err := waitFor(name+"'s "+imagesReady+" True", time.Minute, func() (bool, error) {
			return c.conditionOf(name, imagesReady, corev1.ConditionTrue, "", "")
		}); err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.Log(s.reporterLogs(t))
	}
	s.waitCheckCluster(t, "two nodes", 0, []string{"2 nodes: 2 ready"}, nil)
}

// reporterLogs is the end of every reporter's log.
func (s *scenario) reporterLogs(t *testing.T) string { return s.containerLogs(t, "reporter", 15) }

// containerLogs is the last n lines of the container ctr of every pod of the chart.
func (s *scenario) containerLogs(t *testing.T, ctr string, n int) string {
	pods, err := s.c.client.CoreV1().Pods(chartNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "----- %s on %s, %s -----\n%s\n", p.Name, p.Spec.NodeName, ctr, tailString(s.containerLog(t, p.Name, ctr), n))
	}
	return b.String()
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ownNodeImagesOnly: with the token of node 2's agent pod, writing node 1's NodeImages is refused by the
// chart's admission policy, and writing node 2's own is allowed.
func (s *scenario) ownNodeImagesOnly(t *testing.T) {
	c := s.c
	ctx := context.Background()
	pods, err := c.client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node2Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the agent pod on node 2: %v (%d pods)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	exp := int64(600)
	tok, err := c.client.CoreV1().ServiceAccounts(chartNS).CreateToken(ctx, pod.Spec.ServiceAccountName, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: &authv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.restConfig)
	cfg.BearerToken = tok.Status.Token
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"holdfast.test/probe":"written-by-the-test"}}}`)
	write := func(name string) error {
		return as.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(report.NodeImagesPath, name).Body(patch).Do(ctx).Error()
	}
	if err := write(nodeName); err == nil || !strings.Contains(err.Error(), "may only write its own") {
		t.Errorf("node 2's reporter writing node 1's NodeImages: %v, want refused by the policy", err)
	}
	if err := write(node2Name); err != nil {
		t.Errorf("node 2's reporter writing its own NodeImages: %v", err)
	}
}

// pulledFromPeer: a Deployment pinned to node 2 needs an image no node holds: node 2's condition says it is
// being pulled from peers and check --cluster that no node holds it. Its archive dropped into node 1's
// images dir, node 1 imports and pins it, node 2 pulls it from node 1's spegel through its own, pins and
// leases it, and the pod starts (its pull policy Never: only what the node holds can run).
func (s *scenario) pulledFromPeer(t *testing.T, n *node2) {
	c := s.c
	ctx := context.Background()
	one := int32(1)
	d := deployment("needs-peer", imgPeer, &one)
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node2Name}
	d.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	if _, err := c.client.AppsV1().Deployments(workloadNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.AppsV1().Deployments(workloadNS).Delete(context.Background(), d.Name, metav1.DeleteOptions{})
	})
	if err := waitFor(node2Name+" naming "+imgPeer+" as pulled from peers", time.Minute, func() (bool, error) {
		return c.conditionOf(node2Name, imagesReady, corev1.ConditionFalse, "ImagesMissing", imgPeer+" missing: ")
	}); err != nil {
		pods, _ := c.client.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s on %s: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, podProblems(&p))
		}
		t.Fatalf("%v\n%s", err, s.reporterLogs(t))
	}
	s.waitCheckCluster(t, "no node holds it", 1, []string{"missing images no node holds", imgPeer}, nil)
	if t.Failed() {
		t.Fatal(s.reporterLogs(t))
	}

	start := time.Now()
	archive := filepath.Join(c.imagesDir, "peer.tar")
	t.Cleanup(func() {
		// Node 1 as it was: no archive, and, once its agent has let the image go, no record of it.
		if err := os.Remove(archive); err != nil {
			t.Error(err)
		}
		if err := waitFor("node 1's agent to unpin "+imgPeer, time.Minute, func() (bool, error) {
			pinned, err := c.criPinned(imgPeer)
			return err == nil && !pinned, err
		}); err != nil {
			t.Error(err)
		}
		if out, err := c.crictl("rmi", imgPeer); err != nil {
			t.Errorf("crictl rmi %s on node 1: %v\n%s", imgPeer, err, out)
		}
	})
	if err := writeStaticImage(archive, imgPeer, filepath.Join(c.k8sBin, "pause"), "/pause",
		map[string]string{"holdfast.test": imgPeer}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(imgPeer+" pinned on node 2", 2*time.Minute, func() (bool, error) {
		pinned, found, err := criImageVia(n.crictl, imgPeer)
		return found && pinned, err
	}); err != nil {
		t.Fatalf("%v\n%s", err, s.agentLogs())
	}
	t.Logf("%s pinned on node 2 %.1fs after its archive was written on node 1", imgPeer, time.Since(start).Seconds())
	if pinned, err := c.criPinned(imgPeer); err != nil || !pinned {
		t.Errorf("%s on node 1: pinned %v (%v)", imgPeer, pinned, err)
	}
	list, err := os.ReadFile(n.path(filepath.Join(s.dataDir, "peers", "required.txt")))
	if err != nil || !strings.Contains(string(list), imgPeer) {
		t.Errorf("node 2's peer source: %v\n%s", err, list)
	}
	if err := waitFor("the pod on node 2 running", 2*time.Minute, func() (bool, error) {
		pods, err := c.client.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "app=needs-peer"})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		p := pods.Items[0]
		return p.Spec.NodeName == node2Name && p.Status.Phase == corev1.PodRunning, fmt.Errorf("%s on %s: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, podProblems(&p))
	}); err != nil {
		t.Error(err)
	}
	if err := waitFor(node2Name+"'s "+imagesReady+" True", time.Minute, func() (bool, error) {
		return c.conditionOf(node2Name, imagesReady, corev1.ConditionTrue, "", "")
	}); err != nil {
		t.Error(err)
	}
	// The pull went through node 2's spegel, which found it on node 1's.
	pods, err := c.client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		log := s.containerLog(t, p.Name, "spegel")
		if !strings.Contains(log, "/v2/peer/manifests/") {
			t.Errorf("the spegel log of %s on %s shows no request for %s:\n%s", p.Name, p.Spec.NodeName, imgPeer, tailString(log, 30))
		}
	}
}
