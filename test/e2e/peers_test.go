package e2e

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/typeurl/v2"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// Two nodes on one machine, for the peer tests: testenv's peer setup (a
// network namespace the test makes and removes, a containerd and a spegel
// per node, one address each on the namespace's loopback device). Node B's
// hosts.toml sends e2e.local to B's spegel, its upstream a closed port: only
// a peer can serve B.

const (
	peerNet          = testenv.PeerNet
	peerRegistryHost = "e2e.local"
)

// peerNode is one node of a peer test.
type peerNode struct {
	*daemon
	ns      string // the network namespace
	addr    string // its address in the namespace
	layout  embedded.Layout
	dataDir string // holdfast's
	spegel  string // spegel's log

	spegelBin, peer string // spegel, and the address of the peer it bootstraps from
	stopSpegel      func()
}

// TestPeersShareImports: what holdfast writes on node A while spegel runs
// (`holdfast import` of an archive, a pass over an images dir), node B
// pulls from A's spegel through its own, by tag and by digest, with
// holdfast's pull list; an image put on A with containerd's
// own import (`ctr images import`'s code) is not shared, and B's pull of it
// fails. The sharing rests on what holdfast writes at commit time: a
// name@digest record beside each tag, and the distribution source labels
// that tell spegel which registry a blob came from.
func TestPeersShareImports(t *testing.T) {
	a, b := peerPair(t, startPeerNode)
	b.mirrorThroughSpegel(t)
	created := a.contentCreated(t)

	shared := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/shared:1"}})
	archive := filepath.Join(tempDir(t), "shared.tar")
	writeArchive(t, archive, fixture.None, fixture.CompressOptions{},
		func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, shared) })
	if res := holdfast(t, "import", "--address", a.Address, "--data-dir", a.dataDir, archive); res.Code != 0 {
		t.Fatalf("holdfast import on A exited %d\n%s", res.Code, res.Stderr)
	}
	// And one from an images dir, by a pass.
	synced := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/synced:1"}})
	imagesDir := filepath.Join(tempDir(t), "images")
	writeArchive(t, filepath.Join(imagesDir, "synced.tar.gz"), fixture.Gzip, fixture.CompressOptions{},
		func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, synced)
		})
	if res := a.sync(t, a.dataDir, imagesDir); res.Code != 0 {
		t.Fatalf("holdfast sync on A exited %d\n%s", res.Code, res.Stderr)
	}
	// Every blob holdfast wrote on A: what A's containerd committed until
	// it had committed the two sources' states, which each import writes last.
	var states []digest.Digest
	if err := a.Client.ContentStore().Walk(a.ctx(), func(info content.Info) error {
		states = append(states, info.Digest)
		return nil
	}, fmt.Sprintf("labels.%q", hfruntime.LabelState)); err != nil || len(states) != 2 {
		t.Fatalf("A's state blobs: %v (%v), want two", states, err)
	}
	var wrote []digest.Digest
	for d := range created {
		wrote = append(wrote, d)
		if !slices.ContainsFunc(states, func(s digest.Digest) bool { return !slices.Contains(wrote, s) }) {
			break
		}
	}
	control := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/control:1"}})
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, control))
	}()
	if _, err := a.Client.Import(a.ctx(), pr); err != nil {
		t.Fatalf("containerd's import of the control image on A: %v", err)
	}

	target := shared.Target.Digest
	byTag, byDigest := peerRegistryHost+"/peers/shared:1", peerRegistryHost+"/peers/shared@"+target.String()
	syncedTag := peerRegistryHost + "/peers/synced:1"
	// A's spegel advertises what it learns from containerd's events, and
	// the routing table fills as the two find each other: B may have to try
	// again.
	deadline := time.Now().Add(2 * time.Minute)
	for attempt := 1; ; attempt++ {
		res := b.pull(t, byTag, byDigest, syncedTag)
		if res.Code == 0 {
			t.Logf("B pulled the shared image from its peers at attempt %d", attempt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's pull of the shared image through its peers still fails after %d attempts: exit %d\n%s", attempt, res.Code, tail(res.Stderr, 10))
		}
		time.Sleep(time.Second)
	}
	for n, want := range map[string]ocispec.Descriptor{byTag: shared.Target, byDigest: shared.Target, syncedTag: synced.Target} {
		rec, ok := b.record(t, n)
		if !ok || rec.Target.Digest != want.Digest {
			t.Errorf("B: %s is %v (%v), want %s", n, rec.Target.Digest, ok, want.Digest)
		}
	}
	for _, d := range b.hostBlobs(t, shared.Target) {
		if !b.hasBlob(t, d.Digest) {
			t.Errorf("B lacks blob %s of the shared image", d.Digest)
		}
	}
	if log := readFile(t, b.spegel); !strings.Contains(log, target.String()) {
		t.Errorf("B's spegel log does not name the image it served:\n%s", tail(log, 20))
	}

	// The control: containerd's own import writes neither a name@digest
	// record nor the distribution source labels, and spegel does not share it.
	res := b.pull(t, peerRegistryHost+"/peers/control:1")
	if res.Code == 0 {
		t.Errorf("B pulled the control image, which containerd's own import put on A: spegel shared it")
	}
	if _, ok := b.record(t, peerRegistryHost+"/peers/control:1"); ok {
		t.Errorf("B holds the control image")
	}
	t.Logf("control pull on B: exit %d: %s", res.Code, tail(res.Stderr, 3))

	// spegel logs an error for each blob committed without a distribution
	// source: for the control's, and for nothing holdfast wrote (its state
	// blobs and its probe of the content store's directory included).
	controlBlobs := map[digest.Digest]bool{control.Target.Digest: true}
	for _, m := range control.Manifests {
		controlBlobs[m.Descriptor.Digest], controlBlobs[m.Config.Digest] = true, true
		for _, l := range m.Layers {
			controlBlobs[l.Digest()] = true
		}
	}
	if len(wrote) < 8 {
		t.Fatalf("A's containerd committed %d blobs for holdfast's two imports, want the two images' and their states: %v", len(wrote), wrote)
	}
	// A's spegel handles containerd's events in order: once it has found
	// no source on a control blob, it has read every blob holdfast wrote.
	var unlabelled []string
	deadline = time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(unlabelled, func(d string) bool { return controlBlobs[digest.Digest(d)] }) {
		if time.Now().After(deadline) {
			t.Fatalf("A's spegel logged no missing distribution source for the control's blobs: the check proves nothing\n%s", tail(readFile(t, a.spegel), 20))
		}
		time.Sleep(200 * time.Millisecond)
		unlabelled = unlabelledBlobs(readFile(t, a.spegel))
	}
	for _, d := range wrote {
		if slices.Contains(unlabelled, d.String()) {
			t.Errorf("A's spegel found no distribution source on %s, which holdfast wrote", d)
		}
	}
}

// TestPeersOnContainerd16: on Debian's containerd 1.6, which sends no
// content events, spegel (v0.7.2-k3s1, content events on: its command line
// has no switch) advertises a live import's tag but none of its blobs, so
// node B resolves the tag through its peers and cannot fetch the manifest;
// once A's spegel starts again, it advertises what the store holds, by the
// distribution source labels holdfast wrote, and B pulls by tag and by
// digest.
func TestPeersOnContainerd16(t *testing.T) {
	peersWithoutContentEvents(t, startPeerNode16)
}

// TestPeersOnContainerd17: containerd 1.7 sends no content events either:
// as on 1.6.
func TestPeersOnContainerd17(t *testing.T) {
	peersWithoutContentEvents(t, startPeerNodeOn(lineNamed(t, "1.7")))
}

// TestPeersShareLiveOnLines: on containerd 2.2, 2.3 and K3s's fork, which
// send content events, B pulls by tag and by digest what holdfast imported
// on A while spegel ran, through the two spegels, without A's spegel
// starting again.
func TestPeersShareLiveOnLines(t *testing.T) {
	for _, name := range []string{"2.2", "2.3", "k3s-2.3"} {
		t.Run("containerd-"+name, func(t *testing.T) {
			a, b := peerPair(t, startPeerNodeOn(lineNamed(t, name)))
			b.mirrorThroughSpegel(t)
			img := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/live:1"}})
			archive := filepath.Join(tempDir(t), "live.tar")
			writeArchive(t, archive, fixture.None, fixture.CompressOptions{},
				func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, img) })
			if res := holdfast(t, "import", "--address", a.Address, "--data-dir", a.dataDir, archive); res.Code != 0 {
				t.Fatalf("holdfast import on A exited %d\n%s", res.Code, res.Stderr)
			}
			tag, byDigest := img.Names[0], peerRegistryHost+"/peers/live@"+img.Target.Digest.String()
			b.pullFromPeer(t, img, tag, byDigest)
			// B's spegel mirrored the pull, A's served it.
			for _, n := range []*peerNode{a, b} {
				if log := readFile(t, n.spegel); !strings.Contains(log, "/v2/peers/live/manifests/") {
					t.Errorf("the spegel at %s logged no request for the image:\n%s", n.addr, tail(log, 20))
				}
			}
			if got := unlabelledBlobs(readFile(t, a.spegel)); len(got) != 0 {
				t.Errorf("A's spegel found no distribution source on %d blobs holdfast wrote: %v", len(got), got)
			}
		})
	}
}

// lineNamed is the matrix's line of that name; its containerd must be there.
func lineNamed(t *testing.T, name string) testenv.Line {
	t.Helper()
	l, ok := testenv.LineNamed(name)
	if !ok {
		t.Fatalf("no containerd line %s in testenv.Lines", name)
	}
	return l
}

// pullFromPeer has B pull refs of img (the routing table may take a few
// tries to fill) and checks B holds every name at img's target and every
// blob.
func (n *peerNode) pullFromPeer(t *testing.T, img *fixture.Image, refs ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for attempt := 1; ; attempt++ {
		res := n.pull(t, refs...)
		if res.Code == 0 {
			t.Logf("pulled from the peer at attempt %d", attempt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pull from the peer still fails: exit %d\n%s", res.Code, tail(res.Stderr, 10))
		}
		time.Sleep(time.Second)
	}
	for _, r := range refs {
		if rec, ok := n.record(t, r); !ok || rec.Target.Digest != img.Target.Digest {
			t.Errorf("%s is %v (%v), want %s", r, rec.Target.Digest, ok, img.Target.Digest)
		}
	}
	for _, d := range n.hostBlobs(t, img.Target) {
		if !n.hasBlob(t, d.Digest) {
			t.Errorf("blob %s is missing", d.Digest)
		}
	}
}

// peersWithoutContentEvents: on a containerd that sends no content events
// (1.6, 1.7), B resolves the tag of A's live import but not its manifest
// until A's spegel starts again; then B pulls by tag and by digest.
func peersWithoutContentEvents(t *testing.T, start func(t *testing.T, ns, spegel, addr, peer string) *peerNode) {
	a, b := peerPair(t, start)
	b.mirrorThroughSpegel(t)

	img := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/old:1"}})
	archive := filepath.Join(tempDir(t), "old.tar")
	writeArchive(t, archive, fixture.None, fixture.CompressOptions{},
		func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, img) })
	if res := holdfast(t, "import", "--address", a.Address, "--data-dir", a.dataDir, archive); res.Code != 0 {
		t.Fatalf("holdfast import on A exited %d\n%s", res.Code, res.Stderr)
	}
	tag, byDigest := img.Names[0], peerRegistryHost+"/peers/old@"+img.Target.Digest.String()
	// The tag is found through the peers (the routing table may take a
	// few tries to fill), the manifest it names is not.
	notFound := "manifests/" + img.Target.Digest.String() + "?ns=" + peerRegistryHost + " not found"
	deadline := time.Now().Add(2 * time.Minute)
	for attempt := 1; ; attempt++ {
		res := b.pull(t, tag)
		if res.Code == 0 {
			t.Fatalf("B pulled a live import from A at attempt %d: spegel advertised its blobs without content events", attempt)
		}
		if strings.Contains(res.Stderr, notFound) {
			t.Logf("attempt %d: the tag resolves through the peers, its manifest is not found: %s", attempt, tail(res.Stderr, 1))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's pull never reached A's tag: exit %d\n%s", res.Code, tail(res.Stderr, 10))
		}
		time.Sleep(time.Second)
	}

	a.stopSpegel()
	a.stopSpegel = a.startSpegel(t)
	b.pullFromPeer(t, img, tag, byDigest)
}

// contentCreated yields the digest of each blob the node's containerd
// commits from now on, in order, until the test ends.
func (n *peerNode) contentCreated(t *testing.T) iter.Seq[digest.Digest] {
	t.Helper()
	ctx, cancel := context.WithCancel(n.ctx())
	t.Cleanup(cancel)
	events, errs := n.Client.EventService().Subscribe(ctx, `topic=="/content/create"`)
	return func(yield func(digest.Digest) bool) {
		for {
			select {
			case env := <-events:
				ev, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					t.Fatalf("reading a /content/create event: %v", err)
				}
				if !yield(digest.Digest(ev.(*eventtypes.ContentCreate).Digest)) {
					return
				}
			case err := <-errs:
				t.Fatalf("containerd's events: %v", err)
			case <-time.After(time.Minute):
				t.Fatalf("no /content/create event in a minute")
			}
		}
	}
}

// unlabelledBlobs is the digests a spegel log says it found no distribution
// source label on.
func unlabelledBlobs(log string) []string {
	var out []string
	for _, m := range unlabelledRE.FindAllStringSubmatch(log, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

var unlabelledRE = regexp.MustCompile(`no distribution source labels found for (sha256:[0-9a-f]{64})`)

// peerPair starts nodes A and B with start, in a network namespace of their
// own, each bootstrapping from the other (whichever comes up first).
func peerPair(t *testing.T, start func(t *testing.T, ns, spegel, addr, peer string) *peerNode) (a, b *peerNode) {
	t.Helper()
	requireRoot(t)
	spegel := spegelBin(t)
	ns := newNetns(t, peerNet+"1", peerNet+"2")
	return start(t, ns, spegel, peerNet+"1", peerNet+"2"), start(t, ns, spegel, peerNet+"2", peerNet+"1")
}

// newNetns makes a network namespace with its loopback device up and addrs
// on it, and removes it after the test.
func newNetns(t *testing.T, addrs ...string) string {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "spegel", "ip (iproute2) is not on PATH: the peer tests make a network namespace with it")
	}
	name := fmt.Sprintf("holdfast-peers-%d", os.Getpid())
	remove, err := testenv.NewNetns(name, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remove() })
	return name
}

// startPeerNode starts a node: the embedded containerd and a spegel in
// namespace ns at addr, its spegel bootstrapping from the node at peer
// (spegel's HTTP bootstrap: each serves its own address and ID).
func startPeerNode(t *testing.T, ns, spegel, addr, peer string) *peerNode {
	t.Helper()
	dir := tempDir(t)
	// containerd runs in the namespace: a pull through the transfer service,
	// and the CRI's, go out from it.
	wrapper := filepath.Join(dir, "in-netns")
	if err := testenv.WriteNetnsWrapper(wrapper, ns, holdfastBin); err != nil {
		t.Fatal(err)
	}
	p := startContainerd(t, filepath.Join(dir, "containerd"), wrapper)
	n := &peerNode{daemon: connect(t, "node "+addr, p.Address(), false), ns: ns, addr: addr, layout: p.Layout(),
		dataDir: filepath.Join(dir, "holdfast"), spegel: filepath.Join(dir, "spegel.log"), spegelBin: spegel, peer: peer}
	n.stopSpegel = n.startSpegel(t)
	return n
}

// startPeerNode16 starts a node on Debian's containerd 1.6 (outside the
// namespace: holdfast and spegel, which are in it, are what go out to the
// network) and a spegel in ns at addr.
func startPeerNode16(t *testing.T, ns, spegel, addr, peer string) *peerNode {
	t.Helper()
	return newPeerNode(t, newDebian(t, false), ns, spegel, addr, peer)
}

// startPeerNodeOn is startPeerNode16 on a line of the matrix (its CRI on).
func startPeerNodeOn(l testenv.Line) func(t *testing.T, ns, spegel, addr, peer string) *peerNode {
	return func(t *testing.T, ns, spegel, addr, peer string) *peerNode {
		t.Helper()
		return newPeerNode(t, newLine(t, l), ns, spegel, addr, peer)
	}
}

// newPeerNode starts p and a spegel in ns at addr beside it.
func newPeerNode(t *testing.T, p *external, ns, spegel, addr, peer string) *peerNode {
	t.Helper()
	d := p.start()
	n := &peerNode{daemon: d, ns: ns, addr: addr,
		layout:  embedded.Layout{Root: filepath.Join(p.dir, "root"), Address: p.sock, RegistryConfigPath: filepath.Join(p.dir, "certs.d")},
		dataDir: filepath.Join(p.dir, "holdfast"), spegel: filepath.Join(p.dir, "spegel.log"), spegelBin: spegel, peer: peer}
	n.stopSpegel = n.startSpegel(t)
	return n
}

// startSpegel starts the node's spegel and returns what stops it; the test's
// end stops it too.
func (n *peerNode) startSpegel(t *testing.T) (stop func()) {
	t.Helper()
	sp := testenv.Spegel{Addr: n.addr, Peer: n.peer, ContainerdSock: n.layout.Address, Namespace: namespace,
		ContentRoot: n.layout.Root, DataDir: filepath.Join(filepath.Dir(n.spegel), "spegel")}
	args := append([]string{"netns", "exec", n.ns, n.spegelBin}, sp.Args()...)
	logf, err := os.OpenFile(n.spegel, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting spegel at %s: %v", n.addr, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("spegel at %s:\n%s", n.addr, tail(readFile(t, n.spegel), 40))
		}
	})
	return stop
}

// mirrorThroughSpegel writes the node's hosts.toml for e2e.local: its own
// spegel, then an upstream no one serves.
func (n *peerNode) mirrorThroughSpegel(t *testing.T) {
	t.Helper()
	if err := testenv.WriteMirror(n.layout.RegistryConfigPath, peerRegistryHost, n.addr); err != nil {
		t.Fatal(err)
	}
}

// pull has holdfast pull refs on the node, as a pull list, from inside the
// namespace (holdfast fetches itself) with the node's hosts.toml.
func (n *peerNode) pull(t *testing.T, refs ...string) result {
	t.Helper()
	images := filepath.Join(tempDir(t), "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(images, "peers.txt"), []byte(strings.Join(refs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ns, holdfastBin, "sync", "--address", n.Address, "--data-dir", n.dataDir,
		"--images", images, "--registry-config", n.layout.RegistryConfigPath, "--pull-timeout", "20s")
	return runHoldfast(t, cmd)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dialIn dials in the network namespace ns (testenv.DialIn): the agent's
// loopback-only listener in a peer test is there.
func dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return testenv.DialIn(ns)
}
