package e2e

import (
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/runtime"
	hfcontainerd "github.com/holdfast-project/holdfast/internal/runtime/containerd"
	"github.com/holdfast-project/holdfast/internal/runtime/runtimetest"
)

// TestRuntimeConformance: containerd's adapter behaves as the suite says
// every runtime must (the fake passes the same suite in its unit tests), on
// the embedded containerd and on Debian's 1.6.
func TestRuntimeConformance(t *testing.T) {
	forEachLine(t, func(t *testing.T, d *daemon) {
		var targets [2]ocispec.Descriptor
		for i, name := range []string{"e2e.local/conformance/a:1", "e2e.local/conformance/b:1"} {
			img := build(t, fixture.ImageSpec{Names: []string{name}})
			keepCtrImport(t, d, img)
			targets[i] = img.Target
		}
		imported := build(t, fixture.ImageSpec{Names: []string{"e2e.local/conformance/imported:1"}})
		archive := filepath.Join(tempDir(t), "imported.tar")
		writeDockerSave(t, archive, imported)
		rt, err := hfcontainerd.New(context.Background(), d.Address, namespace)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close() })
		backend := func(t *testing.T) runtimetest.Backend {
			return runtimetest.Backend{
				Runtime:    rt,
				Import:     importer.Import,
				LeaseWants: importer.LeaseWants,
				CreateRecord: func(t *testing.T, img runtime.Image) {
					// Made as the CRI makes its records (managed): the CRI
					// labels a record made without it, target included,
					// from its own read of the record, which may land after
					// the pin the test makes next and point it back.
					labels := maps.Clone(img.Labels)
					if labels == nil {
						labels = map[string]string{}
					}
					if _, ok := labels["io.cri-containerd.image"]; !ok {
						labels["io.cri-containerd.image"] = "managed"
					}
					if _, err := d.Client.ImageService().Create(d.ctx(), images.Image{Name: img.Name, Target: img.Target, Labels: labels}); err != nil {
						t.Fatal(err)
					}
				},
				Targets: targets,
				Archive: func() (io.ReadCloser, error) { return os.Open(archive) },
				Name:    "e2e.local/conformance/imported:1",
				Settled: func(t *testing.T, name string) {
					// The CRI has labelled the record: its write is done. A
					// line that never labels is waited for no longer than
					// the deadline; nothing is asserted here.
					deadline := time.Now().Add(10 * time.Second)
					for time.Now().Before(deadline) {
						img, err := d.Client.ImageService().Get(d.ctx(), name)
						if err == nil && img.Labels["io.cri-containerd.image"] == "managed" {
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				},
			}
		}
		runtimetest.Run(t, "e2e.local/conformance/"+d.Name+"/", backend)
		info, err := rt.Server(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		runtimetest.RunFurther(t, "e2e.local/conformance/"+d.Name+"/", func(t *testing.T) runtimetest.Store {
			return runtimetest.Store{
				Backend: backend(t),
				Can:     runtimetest.Capabilities{PinEvents: true, Ingests: true, Pulls: true, ExpireRecords: runtime.ExpiresRecords(info.Version)},
				Label:   func(t *testing.T, name, key, value string) { d.labelRecord(t, name, key, value) },
				GC:      func(t *testing.T) { d.forceGC(t, targets[1]) },
				DeleteBlob: func(t *testing.T, dg digest.Digest) {
					if err := d.Client.ContentStore().Delete(d.ctx(), dg); err != nil {
						t.Fatalf("deleting blob %s: %v", dg, err)
					}
				},
				NoCRI: func(t *testing.T) runtime.Runtime { return conformanceRuntime(t, d, "holdfast-conformance-nocri") },
				// A one-off sync beside an agent: another data dir's owner.
				Another: func(t *testing.T) runtime.Runtime {
					return conformanceRuntime(t, d, namespace, hfcontainerd.WithOwner(tempDir(t)))
				},
				Ingests: func(t *testing.T) []string {
					var refs []string
					for _, ref := range d.ingests(t) {
						if strings.HasPrefix(ref, "holdfast-") {
							refs = append(refs, ref)
						}
					}
					return refs
				},
			}
		})
	})
}

// conformanceRuntime is a runtime of d's store in namespace, closed when t ends.
func conformanceRuntime(t *testing.T, d *daemon, ns string, opts ...hfcontainerd.Option) *hfcontainerd.Runtime {
	t.Helper()
	rt, err := hfcontainerd.New(context.Background(), d.Address, ns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}
