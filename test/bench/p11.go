package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// P11: staging one image on N simulated nodes (p11net.go, p11node.go),
// through the peers, in the ImageSet's waves and with every node pulling at
// once; the time, and the bytes each node's registry served.
const (
	ScenarioP11Link = "P11 link" // one TCP transfer from node 1 to node 2 over the shaped links
	// MethodP11Link is the link check's one transfer.
	MethodP11Link = "TCP node 1 → node 2"
	// MethodP11Waves: an ImageSet naming the image, until its Staged
	// condition is True.
	MethodP11Waves = "ImageSet (waves) → Staged"
	// MethodP11AllAtOnce: every node's agent told at once (PUT
	// /required) that it needs the image, until every node holds it pinned.
	MethodP11AllAtOnce = "every node at once (PUT /required) → all pinned"
)

// P11Config tunes P11; the zero value is the defaults (the quick set's
// when the archive set is quick).
type P11Config struct {
	Nodes      []int `json:"nodes,omitempty"`       // node counts, each measured; default 2, 4, 8 (quick: 2)
	RateMbit   int   `json:"rate_mbit,omitempty"`   // each link's rate, each way; default 200
	ImageBytes int64 `json:"image_bytes,omitempty"` // the image's layer content; default 200 MiB (quick: 4 MiB)
	Layers     int   `json:"layers,omitempty"`      // default 4 (quick: 2)
	// ReportInterval is the reporters' --interval; default 10s, the chart's.
	ReportInterval time.Duration `json:"report_interval,omitempty"`
	// ClusterBin holds etcd and kube-apiserver; default
	// $HOLDFAST_CLUSTER_BIN, else make deps-cluster's dir.
	ClusterBin string `json:"cluster_bin,omitempty"`
}

// withDefaults fills what c leaves zero.
func (c P11Config) withDefaults(quick bool) P11Config {
	if len(c.Nodes) == 0 {
		c.Nodes = []int{2, 4, 8}
		if quick {
			c.Nodes = []int{2}
		}
	}
	if c.RateMbit <= 0 {
		c.RateMbit = 200
	}
	if c.ImageBytes <= 0 {
		c.ImageBytes = 200 * mib
		if quick {
			c.ImageBytes = 4 * mib
		}
	}
	if c.Layers <= 0 {
		c.Layers = 4
		if quick {
			c.Layers = 2
		}
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = 10 * time.Second
	}
	if c.ClusterBin == "" {
		c.ClusterBin = defaultClusterBin()
	}
	return c
}

// Validate checks what the flags set.
func (c P11Config) Validate() error {
	for _, n := range c.Nodes {
		if n < 2 || n > 64 {
			return fmt.Errorf("P11 node count %d: want 2 to 64", n)
		}
	}
	if c.RateMbit < 0 || c.RateMbit > 10000 {
		return fmt.Errorf("P11 rate %d Mbit/s: want up to 10000", c.RateMbit)
	}
	return nil
}

// p11SampleTimeout bounds one sample, from its start until Staged (or every
// node pinned); a sample that times out fails.
const p11SampleTimeout = 15 * time.Minute

// missing says why P11 cannot run here, or "".
func (c P11Config) missing() string {
	if why := peersMissing(); why != "" {
		return strings.ReplaceAll(why, "P8", "P11")
	}
	for _, t := range []string{"tc", "nft", "helm"} {
		if _, err := exec.LookPath(t); err != nil {
			return t + " is not on PATH (make deps puts helm into bin/; tc is iproute2's, nft nftables')"
		}
	}
	return clusterBinMissing(c.ClusterBin)
}

// simDir is P11's fixed directory beside the work dir: a run killed before
// its clean-up leaves it for the next run to remove.
func (h *harness) simDir() string { return filepath.Join(filepath.Dir(h.work), simPrefix) }

// p11 runs P11 for each node count: one network of the most nodes and one
// API server for all, fresh nodes for each sample.
func (h *harness) p11(ctx context.Context) (err error) {
	c := h.cfg.P11.withDefaults(h.cfg.Set.Name == "quick")
	h.res.Config.P11 = c
	if why := c.missing(); why != "" {
		h.logf("skipping P11: %s", why)
		return nil
	}
	shape := Shape{Count: 1, Layers: c.Layers, LayerSize: c.ImageBytes / int64(c.Layers), Formats: []fixture.Format{fixture.FormatOCI}}
	arch, err := generateOne(ctx, filepath.Join(h.work, "archives", "p11"), "p11", 0, shape, 1, fixture.None, 0)
	if err != nil {
		return err
	}
	h.logf("generated %s (%s)", filepath.Base(arch.Path), formatBytes(arch.Bytes))
	dir := h.simDir()
	if err := removeSimLeftovers(dir, false); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if rerr := removeSimLeftovers(dir, h.cfg.Keep); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	w, err := newSimNetwork(slices.Max(c.Nodes), c.RateMbit)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.remove()) }()
	h.checkLink(ctx, w, c)
	api, err := startSimAPI(ctx, filepath.Join(dir, "api"), c.ClusterBin, dir)
	if err != nil {
		return err
	}
	defer api.stop()
	if err := h.prepareAPI(ctx, api, w.n, c.Nodes); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		for round := 1; round <= h.cfg.Rounds; round++ {
			methods := []string{MethodP11Waves, MethodP11AllAtOnce}
			if round%2 == 0 {
				slices.Reverse(methods)
			}
			for _, m := range methods {
				s, err := h.measureStage(ctx, dir, api, w, c, arch, n, m, round)
				if err != nil {
					return err
				}
				h.record(s)
			}
		}
	}
	return nil
}

// checkLink records one transfer from node 1 to node 2 of the image's size
// or a second's worth at the rate, whichever is more.
func (h *harness) checkLink(ctx context.Context, w *simNetwork, c P11Config) {
	size := max(c.ImageBytes, int64(c.RateMbit)*1e6/8)
	s := Sample{Scenario: ScenarioP11Link, Method: MethodP11Link, Round: 1, Bytes: size}
	bps, err := w.measureLink(ctx, size)
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Seconds = float64(size*8) / bps
		h.logf("P11: link node 1 → node 2: %.0f Mbit/s (shaped to %d)", bps/1e6, c.RateMbit)
	}
	h.record(s)
}

// simLabel is the label of the nodes a set for n nodes selects.
func simLabel(n int) string { return fmt.Sprintf("bench.holdfast.io/n%d", n) }

// prepareAPI applies the chart's CRDs and creates a Node per node, node i
// labelled simLabel(n) "true" for every n ≥ i.
func (h *harness) prepareAPI(ctx context.Context, api *simAPI, nodes int, counts []int) error {
	helm, _ := exec.LookPath("helm")
	chart := filepath.Join(repoRoot(), "deploy", "helm", "holdfast")
	crds, err := api.applyCRDs(ctx, helm, chart)
	if err != nil {
		return err
	}
	h.logf("P11: API server at %s, CRDs %s", api.url, strings.Join(crds, ", "))
	for i := 1; i <= nodes; i++ {
		labels := map[string]string{"kubernetes.io/hostname": simNodeName(i)}
		for _, n := range counts {
			if i <= n {
				labels[simLabel(n)] = "true"
			}
		}
		if err := api.createNode(ctx, simNodeName(i), simNodeAddr(i), labels); err != nil {
			return err
		}
	}
	return nil
}

// repoRoot is the module's root: the working directory or a parent holding
// go.mod (make bench and go test run within the repository).
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}

// measureStage is one sample of method m on n fresh nodes: the archive
// dropped into node 1's images dir; once node 1 holds its image pinned, the
// clock starts and the ImageSet is created (waves) or every other node's
// agent is told it needs the image (all at once); the clock stops at Staged
// (waves) or when every node holds it pinned. Served is what each node's
// registry sent meanwhile. The error is only for what stops the harness.
func (h *harness) measureStage(ctx context.Context, dir string, api *simAPI, w *simNetwork, c P11Config, a Archive, n int, m string, round int) (s Sample, err error) {
	s = Sample{Scenario: p11Scenario(n), Method: m, Round: round, Bytes: a.Bytes}
	run := filepath.Join(dir, fmt.Sprintf("n%d-r%d-%s", n, round, map[bool]string{true: "waves", false: "all"}[m == MethodP11Waves]))
	defer func() {
		if h.cfg.Keep {
			return
		}
		if rerr := os.RemoveAll(run); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if err := h.quiesce(); err != nil {
		return s, err
	}
	name := a.Names[0]
	registry, _, _ := strings.Cut(name, "/")
	var withAPI *simAPI
	var reporterArgs []string
	if m == MethodP11Waves {
		withAPI, reporterArgs = api, p11ReporterArgs(c)
	}
	nodes, err := h.startSimNodes(ctx, run, n, registry, withAPI, reporterArgs)
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	if err != nil {
		s.Error = fmt.Sprintf("starting %d nodes: %v", n, err)
		return s, nil
	}
	defer func() {
		err = errors.Join(err, nodes.stop(ctx))
		if m == MethodP11Waves {
			err = errors.Join(err, api.cleanSets(ctx))
		}
	}()
	runErr := h.seed(ctx, nodes[0], a)
	if runErr == nil && m == MethodP11Waves {
		runErr = api.waitNodeImages(ctx, nodes)
	}
	var before []int64
	if runErr == nil {
		before, runErr = w.servedAll()
	}
	var start, end time.Time
	if runErr == nil {
		start = time.Now()
		if m == MethodP11Waves {
			pinned := make(chan time.Time, 1)
			go func() { at, _ := nodes.waitAllPinned(ctx, name, p11SampleTimeout); pinned <- at }()
			end, runErr = stageBySet(ctx, api, nodes, name, fmt.Sprintf("p11-n%d-r%d", n, round), simLabel(n))
			if runErr == nil {
				h.logf("P11 N=%d: every node held it pinned after %s, Staged after %s", n,
					formatSeconds((<-pinned).Sub(start).Seconds()), formatSeconds(end.Sub(start).Seconds()))
			}
		} else {
			end, runErr = stageAllAtOnce(ctx, nodes, name)
		}
	}
	if runErr == nil {
		s.Seconds = end.Sub(start).Seconds()
		var after []int64
		after, runErr = w.servedAll()
		for i := range n {
			if runErr == nil {
				s.Served = append(s.Served, after[i]-before[i])
			}
		}
	}
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	for _, nd := range nodes {
		if runErr == nil {
			runErr = nd.st.checkImages(ctx, a.Names, true)
		}
	}
	if runErr == nil {
		runErr = nodes.alive()
	}
	if runErr != nil {
		s.Error = runErr.Error()
	}
	return s, nil
}

func p11Scenario(n int) string { return fmt.Sprintf("P11 N=%d", n) }

// p11LeaseNamespace holds the reporters' election Lease.
const p11LeaseNamespace = "default"

// p11ReporterArgs are the reporters' flags beyond the node's own: the
// ImageSets, and an election among them for the leader that writes their
// status.
func p11ReporterArgs(c P11Config) []string {
	return []string{"--interval", c.ReportInterval.String(), "--imagesets", "--leader-elect", "--lease-namespace", p11LeaseNamespace}
}

// seed drops archive a into the node's images dir (a hard link, its mtime an
// hour past so the agent imports it at once) and waits until the node holds
// its image pinned.
func (h *harness) seed(ctx context.Context, nd *simNode, a Archive) error {
	dst := filepath.Join(nd.images, filepath.Base(a.Path))
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(a.Path, past, past); err != nil {
		return err
	}
	if err := os.Link(a.Path, dst); err != nil {
		return fmt.Errorf("linking %s into node 1's images dir: %w", a.Path, err)
	}
	w := newPinWatcher(ctx, nd.st)
	defer w.close()
	if _, err := w.waitPinned(ctx, a.Names[0], 2*time.Minute); err != nil {
		return fmt.Errorf("node 1's import: %w%s", err, logTail(nd.agent.logBase+".err"))
	}
	return nil
}

// stageAllAtOnce tells every node but node 1 at once that it needs name and
// returns when every node holds it pinned.
func stageAllAtOnce(ctx context.Context, nodes simNodes, name string) (time.Time, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, nd := range nodes[1:] {
		wg.Go(func() { errs[i] = nd.require(ctx, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	return nodes.waitAllPinned(ctx, name, p11SampleTimeout)
}

// stageBySet creates the ImageSet set naming name for the nodes labelled
// label, and returns when its Staged condition is True.
func stageBySet(ctx context.Context, api *simAPI, nodes simNodes, name, set, label string) (time.Time, error) {
	obj := imageset.ImageSet{APIVersion: report.APIVersion, Kind: imageset.Kind,
		Metadata: imageset.Meta{ObjectMeta: report.ObjectMeta{Name: set}},
		Spec:     imageset.Spec{Images: []string{name}, NodeSelector: map[string]string{label: "true"}}}
	if err := api.do(ctx, http.MethodPost, imageset.Path, obj, nil); err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p11SampleTimeout)
	defer cancel()
	var last imageset.ImageSet
	for {
		var got imageset.ImageSet
		if err := api.do(ctx, http.MethodGet, imageset.Path+"/"+set, nil, &got); err == nil {
			last = got
			for _, c := range got.Status.Conditions {
				// Staged counts only when it speaks of every node: a
				// leader that counts fewer selected nodes is not done.
				if c.Type == imageset.Staged && c.Status == imageset.True && got.Status.Nodes.Selected == len(nodes) {
					return time.Now(), nil
				}
			}
		}
		if err := nodes.alive(); err != nil {
			return time.Time{}, err
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Time{}, fmt.Errorf("ImageSet %s not Staged within %s (status %+v)%s", set, p11SampleTimeout, last.Status, nodes.notes())
		}
	}
}

// cleanSets deletes every ImageSet, NodeImages and the election's Lease,
// so that the next sample's reporters start from nothing.
func (a *simAPI) cleanSets(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	for _, path := range []string{imageset.Path, "/apis/" + report.APIVersion + "/nodeimages",
		"/apis/coordination.k8s.io/v1/namespaces/" + p11LeaseNamespace + "/leases"} {
		if err := a.do(ctx, http.MethodDelete, path, nil, nil); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitNodeImages waits until every node's reporter has written its
// NodeImages, as in a cluster whose reporters run before the set is made.
func (a *simAPI) waitNodeImages(ctx context.Context, nodes simNodes) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, nd := range nodes {
		for {
			err := a.do(ctx, http.MethodGet, "/apis/"+report.APIVersion+"/nodeimages/"+nd.name, nil, nil)
			if err == nil {
				break
			}
			if err := nd.alive(); err != nil {
				return err
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("%s's reporter wrote no NodeImages within 2 minutes: %v%s", nd.name, err, logTail(nd.reporter.logBase+".err"))
			}
		}
	}
	return nil
}
