package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// TestPullRequiredFromPeers: two nodes, each running `holdfast run`; B's
// with --pull-required, given a required set naming an image neither holds.
// An archive of it dropped into A's images dir is imported there, and B pulls
// it from A's spegel through its own, pins it and leases it as its peer
// source; it stays complete on B once A's archive is deleted, A's agent has
// released it and A's copy is collected; and once no workload needs it, B
// releases it after the grace period. Both enforce a signature policy: an
// image signed inside an archive on A is pinned verified on B, its
// signature fetched through the peers from the record A names it by, and
// an image A holds unsigned is refused on B.
func TestPullRequiredFromPeers(t *testing.T) {
	a, b := peerPair(t, startPeerNode)
	ns := a.ns

	needed := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/needed:1"}})
	name := needed.Names[0]
	aImages := filepath.Join(tempDir(t), "images")
	// B enforces a signature policy for e2e.local/sig/*, which needed:1 is
	// not; A one for the two signed images alone, by the same keys: the
	// scene's, signed by its legacy .sig manifest, and one signed by a
	// sigstore bundle referrer.
	scene := writeSignedScene(t, filepath.Join(tempDir(t), "scene"))
	bundled := writeBundleSigned(t, scene.policyDir, filepath.Join(tempDir(t), "bundled.tar"))
	policy := filepath.Join(scene.policyDir, "b.yaml")
	policyA := filepath.Join(scene.policyDir, "a.yaml")
	const bundleRule = "  - images: [\"e2e.local/sig/oci-bundled\"]\n    keys: [bundle.pub]\n"
	for p, rules := range map[string]string{
		policy:  bundleRule + "  - images: [\"e2e.local/sig/*\"]\n    keys: [platform.pub]\n",
		policyA: bundleRule + "  - images: [\"e2e.local/sig/oci-signed\"]\n    keys: [platform.pub]\n",
	} {
		if err := os.WriteFile(p, []byte("mode: enforce\nrules:\n"+rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	agentA := startAgentIn(t, ns, a.daemon, a.dataDir, []string{aImages}, "--settle", "200ms", "--policy", policyA)
	agent := startAgentIn(t, ns, b.daemon, b.dataDir, []string{filepath.Join(tempDir(t), "images")},
		"--pull-required", "--peer-grace", "3s", "--settle", "200ms", "--policy", policy,
		// B's agent writes its own mirror config: e2e.local through B's spegel,
		// then the registry itself, which resolves nowhere here.
		"--registry-config", filepath.Join(tempDir(t), "certs.d"),
		"--peer-mirror", fmt.Sprintf("http://%s:%d", b.addr, testenv.SpegelRegistryPort), "--peer-registries", peerRegistryHost,
		"--pull-timeout", "10s")
	peerList := filepath.Join(b.dataDir, "peers", "required.txt")
	agent.put(t, "/required", `{"images":[{"ref":"`+name+`","usedBy":["Deployment shop/app containers/app"]}]}`)
	if r := agentReport(t, agent).Required; r == nil || r.Pulling != 1 || len(r.NotReady) != 1 || !r.NotReady[0].Pulling {
		t.Errorf("B's report before the archive comes: %+v, want the image missing and being pulled from peers", r)
	}
	// The archive comes to A. B's pull may come before A has imported it, or
	// before spegel's routing table has A: it is tried again with backoff,
	// like a pull list's.
	start := time.Now()
	archive := filepath.Join(aImages, "needed.tar")
	writeArchive(t, archive, fixture.None, fixture.CompressOptions{},
		func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, needed) })
	deadline := time.Now().Add(2 * time.Minute)
	for !b.isPinned(t, name) {
		if time.Now().After(deadline) {
			t.Fatalf("B did not pin %s from its peers in 2 minutes\nA's agent:\n%s\nB's agent:\n%s", name, tail(agentA.dump(), 20), tail(agent.dump(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("B pinned %s from its peers %s after the archive was written on A", name, time.Since(start).Round(time.Millisecond))
	if l := leaseOf(t, b, peerList); l == "" {
		t.Errorf("B holds no lease of the peer source %s: %v", peerList, b.holdfastLeases(t))
	}
	var st struct {
		Images []struct {
			Name    string   `json:"name"`
			Pinned  bool     `json:"pinned"`
			Sources []string `json:"sources"`
		} `json:"images"`
	}
	readStatus(t, &st, "--address", b.Address, "--data-dir", b.dataDir)
	named := false
	for _, img := range st.Images {
		if img.Name == name {
			named = img.Pinned && slices.Contains(img.Sources, peerList)
		}
	}
	if !named {
		t.Errorf("B's status does not show %s pinned by the peer source %s: %+v", name, peerList, st.Images)
	}
	if !strings.Contains(readFile(t, b.spegel), needed.Target.Digest.String()) {
		t.Errorf("B's spegel log does not name %s: the pull did not go through it", needed.Target.Digest)
	}
	host := b.hostBlobs(t, needed.Target)
	if log := readFile(t, a.spegel); !strings.Contains(log, "/v2/peers/needed/blobs/"+host[len(host)-1].Digest.String()) {
		t.Errorf("A's spegel log does not show it served %s:\n%s", host[len(host)-1].Digest, tail(log, 20))
	}
	eventually(t, "B's report ready", func() bool {
		r := agentReport(t, agent).Required
		return r != nil && r.Ready && r.Counts[report.Pinned] == 1
	})

	// A loses its copy: the archive deleted, its agent releases it, and its
	// records go (as the kubelet's image GC would take them), content collected.
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's agent to release the archive", func() bool { return leaseOf(t, a, archive) == "" })
	ctx := a.ctx()
	for _, n := range a.recordNames(t) {
		if err := a.Client.ImageService().Delete(ctx, n, images.SynchronousDelete()); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range host {
		if a.hasBlob(t, d.Digest) {
			t.Fatalf("A still holds %s after its records and leases went", d.Digest)
		}
	}
	for _, d := range host {
		if !b.hasBlob(t, d.Digest) {
			t.Errorf("B lacks %s once A's copy is gone", d.Digest)
		}
	}
	if !b.isPinned(t, name) {
		t.Errorf("B unpinned %s once A's copy is gone", name)
	}

	// No workload needs it any more: released after the grace period.
	left := time.Now() // before the agent's grace clock starts, however slow the PUT
	agent.put(t, "/required", `{"images":[]}`)
	if !b.isPinned(t, name) {
		t.Fatalf("B unpinned %s at once, before the grace period", name)
	}
	eventually(t, "B's peer source released", func() bool {
		return !b.isPinned(t, name) && leaseOf(t, b, peerList) == ""
	})
	if waited := time.Since(left); waited < 3*time.Second {
		t.Errorf("released %s after %s, within the grace period of 3s", name, waited)
	}

	// A signed image whose signature came inside the archive on A, under
	// enforce there too: A names the signature as a registry holds it
	// (<repo>:sha256-<hex>.sig), pinned and leased with the image, its blobs
	// labelled with where they come from, so that spegel serves it; B's pull
	// through the peers asks A's spegel for it by that name.
	sceneArchive := filepath.Join(aImages, filepath.Base(scene.archive))
	if err := os.Rename(scene.archive, sceneArchive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A to pin the signed image", func() bool { return a.isPinned(t, scene.signed) })
	signedRec, _ := a.record(t, scene.signed)
	sigName := "e2e.local/sig/oci-signed:" + oci.SignatureTag(signedRec.Target.Digest)
	eventually(t, "A to pin the record of the image's signature", func() bool { return a.isPinned(t, sigName) })
	payloads := a.requireSignatureRecord(t, sigName, sceneArchive, "sig/oci-signed")
	agent.put(t, "/required", `{"images":[{"ref":"`+scene.signed+`"}]}`)
	requirePeerSignature(t, a, b, agent, peerList, scene.signed, sigName, payloads)

	// The same for an image signed by a bundle referrer: A names the index of
	// its referrers by the fallback tag <repo>:sha256-<hex>.
	bundledArchive := filepath.Join(aImages, "bundled.tar")
	if err := os.Rename(bundled, bundledArchive); err != nil {
		t.Fatal(err)
	}
	const bundledName = "e2e.local/sig/oci-bundled:1"
	eventually(t, "A to pin the bundle-signed image", func() bool { return a.isPinned(t, bundledName) })
	bundledRec, _ := a.record(t, bundledName)
	refsName := "e2e.local/sig/oci-bundled:" + oci.ReferrersTag(bundledRec.Target.Digest)
	eventually(t, "A to pin the referrers record of the image", func() bool { return a.isPinned(t, refsName) })
	payloads = a.requireSignatureRecord(t, refsName, bundledArchive, "sig/oci-bundled")
	agent.put(t, "/required", `{"images":[{"ref":"`+scene.signed+`"},{"ref":"`+bundledName+`"}]}`)
	requirePeerSignature(t, a, b, agent, peerList, bundledName, refsName, payloads)

	// An image A holds unsigned (A's policy does not cover it): B's pull
	// finds no signature, and B's policy refuses it: no name on B.
	if !a.isPinned(t, scene.bare) {
		t.Fatalf("A does not hold %s pinned", scene.bare)
	}
	agent.put(t, "/required", `{"images":[{"ref":"`+scene.signed+`"},{"ref":"`+bundledName+`"},{"ref":"`+scene.bare+`"}]}`)
	eventually(t, "B to refuse the unsigned image it pulled from its peers", func() bool {
		return agent.logged("refused", map[string]string{"name": scene.bare, "source": peerList}) > 0
	})
	if _, ok := b.record(t, scene.bare); ok {
		t.Errorf("B holds a record of %s, which its policy refuses", scene.bare)
	}
	eventually(t, "B's report to say the policy refused it", func() bool {
		r := agentReport(t, agent).Required
		return r != nil && slices.ContainsFunc(r.NotReady, func(n report.Image) bool {
			return n.Ref == scene.bare && strings.HasPrefix(n.PullError, "refused by the signature policy")
		})
	})

	// The archives go from A: their leases are released, and the records of
	// the signatures are unpinned with the images'.
	if err := os.Remove(sceneArchive); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bundledArchive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's agent to release the signed archives", func() bool {
		return leaseOf(t, a, sceneArchive) == "" && leaseOf(t, a, bundledArchive) == ""
	})
	for _, n := range []string{scene.signed, sigName, bundledName, refsName} {
		if a.isPinned(t, n) {
			t.Errorf("A still pins %s once the archive that brought it is gone", n)
		}
	}
}

// requireSignatureRecord checks the node's record of an image's signatures
// as its source names it: pinned, its target and every blob under it (a
// signature manifest's config and layers; a referrers index's manifests and
// theirs) held by the source's lease, each labelled with the repository it
// comes from (e2e.local), as spegel needs to serve it; each signature
// manifest's config and layers carry their blobs inline (data), as K3s's
// spegel serves no payload or bundle. It returns the signatures' layers:
// their payloads or bundles.
func (n *peerNode) requireSignatureRecord(t *testing.T, name, source, repo string) []ocispec.Descriptor {
	t.Helper()
	rec, ok := n.record(t, name)
	if !ok || !n.isPinned(t, name) {
		t.Fatalf("%s is not pinned", name)
	}
	l, ok := n.leaseOf(t, source)
	if !ok {
		t.Fatalf("no lease of %s", source)
	}
	held := n.leaseContent(t, l)
	read := func(d ocispec.Descriptor) []byte {
		raw, err := content.ReadBlob(n.ctx(), n.Client.ContentStore(), d)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	all, manifests := []ocispec.Descriptor{rec.Target}, []ocispec.Descriptor{rec.Target}
	if rec.Target.MediaType == ocispec.MediaTypeImageIndex {
		var idx ocispec.Index
		if err := json.Unmarshal(read(rec.Target), &idx); err != nil {
			t.Fatal(err)
		}
		if len(idx.Manifests) == 0 || idx.Manifests[0].ArtifactType != oci.MediaTypeSigstoreBundle {
			t.Errorf("%s lists %+v, want the image's bundle referrers", name, idx.Manifests)
		}
		manifests = idx.Manifests
		all = append(all, idx.Manifests...)
	}
	var layers []ocispec.Descriptor
	for _, md := range manifests {
		var m ocispec.Manifest
		if err := json.Unmarshal(read(md), &m); err != nil {
			t.Fatal(err)
		}
		all = append(append(all, m.Config), m.Layers...)
		layers = append(layers, m.Layers...)
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if int64(len(d.Data)) != d.Size || string(d.Data) != string(read(ocispec.Descriptor{Digest: d.Digest, Size: d.Size})) {
				t.Errorf("%s of %s (%s) carries %d bytes inline, not its blob's %d", d.Digest, name, md.Digest, len(d.Data), d.Size)
			}
		}
	}
	for _, d := range all {
		if !held[d.Digest] {
			t.Errorf("the lease of %s does not hold %s of %s", source, d.Digest, name)
		}
		info, err := n.Client.ContentStore().Info(n.ctx(), d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Labels["containerd.io/distribution.source.e2e.local"]; got != repo {
			t.Errorf("%s of %s is labelled from %q, want %q", d.Digest, name, got, repo)
		}
	}
	return layers
}

// requirePeerSignature: once B's agent is asked for image, A's spegel
// serves B the record sigName names its signatures by, and B pins image
// verified. K3s's spegel (v0.7.2-k3s1) serves a blob only once it takes its
// JSON for an index, a manifest or an image config, and answers 404 (could
// not determine media type) for a signature's payload (a simple-signing
// payload, a sigstore bundle); the manifests A's records name carry their
// payloads inline, so that B has them from the manifests.
func requirePeerSignature(t *testing.T, a, b *peerNode, agent *agentProc, peerList, image, sigName string, payloads []ocispec.Descriptor) {
	t.Helper()
	start := time.Now()
	eventually(t, "B to pin or refuse "+image, func() bool {
		return b.isPinned(t, image) || agent.logged("refused", map[string]string{"name": image, "source": peerList}) > 0
	})
	took := time.Since(start).Round(time.Millisecond)
	repo, tag, _ := strings.Cut(strings.TrimPrefix(sigName, peerRegistryHost+"/"), ":")
	lines := strings.Split(readFile(t, a.spegel), "\n")
	logged := func(path, what string) bool {
		return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, path) && strings.Contains(l, what) })
	}
	if !logged("/v2/"+repo+"/manifests/"+tag, `"status":200`) {
		t.Errorf("A's spegel log does not show it served B %s:\n%s", sigName, tail(strings.Join(lines, "\n"), 20))
	}
	if !b.isPinned(t, image) {
		blocked := slices.ContainsFunc(payloads, func(p ocispec.Descriptor) bool {
			return logged("/v2/"+repo+"/blobs/"+p.Digest.String(), "could not determine media type")
		})
		t.Fatalf("B refused %s %s after it was required (A's spegel refused it a signature's payload: %v):\nB's agent:\n%s\nA's spegel:\n%s", image, took, blocked, tail(agent.dump(), 30), tail(strings.Join(lines, "\n"), 30))
	}
	var st signatureStatus
	readStatus(t, &st, "--address", b.Address, "--data-dir", b.dataDir)
	verified := false
	for _, i := range st.Images {
		verified = verified || i.Name == image && i.Pinned && i.Signature != nil && i.Signature.State == "verified"
	}
	if !verified {
		t.Errorf("B's status does not show %s pinned and verified: %+v", image, st.Images)
	}
	for _, p := range payloads {
		if _, err := b.Client.ContentStore().Info(b.ctx(), p.Digest); err != nil {
			t.Errorf("B does not hold the signature's payload %s of %s: %v", p.Digest, image, err)
		}
	}
	t.Logf("B pinned %s from its peers, signature verified, %s after it was required", image, took)
}

// writeBundleSigned writes an OCI archive at out of e2e.local/sig/oci-bundled:1
// with a sigstore bundle referrer signed by a key of its own, in blobs/ but
// not in index.json (as cosign v3's save leaves it); the public key goes
// into dir as bundle.pub.
func writeBundleSigned(t *testing.T, dir, out string) string {
	t.Helper()
	key := sigtest.NewKey(t)
	if err := os.WriteFile(filepath.Join(dir, "bundle.pub"), sigtest.PublicPEM(t, key), 0o644); err != nil {
		t.Fatal(err)
	}
	img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sig/oci-bundled:1"}})
	blobs := sigtest.Blobs{}
	ref := blobs.Referrer(t, img.Target, sigtest.KeyBundle(t, key, sigtest.Statement(t, img.Target.Digest)))
	art := fixture.Artifact{Descriptor: ref}
	for _, b := range blobs {
		art.Blobs = append(art.Blobs, b)
	}
	writeArchive(t, out, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameOCIFull, Unlisted: []fixture.Artifact{art}}, img)
	})
	return out
}

// spegelBin is the spegel binary on PATH, or the test is skipped saying so.
func spegelBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("spegel")
	if err != nil {
		testenv.Missing(t, "spegel", "spegel is not on PATH (make deps builds it into bin/: scripts/spegel.sh): "+err.Error())
	}
	return p
}

// leaseOf is the ID of the node's lease of the source at path, "" if none.
func leaseOf(t *testing.T, n *peerNode, path string) string {
	t.Helper()
	for _, l := range n.holdfastLeases(t) {
		if l.Labels[hfruntime.LabelSource] == path {
			return l.ID
		}
	}
	return ""
}

// agentReport is the agent's GET /report.
func agentReport(t *testing.T, a *agentProc) report.Report {
	t.Helper()
	code, body := a.get(t, "/report")
	var r report.Report
	if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil {
		t.Fatalf("GET /report: %d %v\n%s", code, err, body)
	}
	return r
}
