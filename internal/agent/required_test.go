package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// TestRequiredImages: a set of required images is judged when it comes
// (pinned, present, missing), its references normalised, a bad one refused;
// an event is recorded for each that is missing or unpinned; a record made
// and pinned later turns its image ready, with an event, without a new set.
func TestRequiredImages(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	d := digest.FromString("app")
	rec := func(name string, pinned bool) hfruntime.Image {
		img := hfruntime.Image{Name: name, Target: ocispec.Descriptor{Digest: d}}
		if pinned {
			img.Labels = map[string]string{hfruntime.LabelCRIPinned: hfruntime.PinnedValue}
		}
		return img
	}
	rt.Create(rec("docker.io/library/nginx:1.27", true))
	rt.Create(rec("registry.example.com/app:1", false))
	a := startReportingAgent(t, rt, dirsConfig(t.TempDir()), newFakeClock())

	if rep := a.Report(0); rep.Required == nil || rep.Required.Known {
		t.Fatalf("before a set: %+v, want a report that knows none", rep.Required)
	}
	if _, ok := a.Held(); ok {
		t.Error("held images before a set")
	}
	if err := a.SetRequired(context.Background(), report.RequiredSet{Images: []report.RequiredImage{{Ref: "Not A Ref"}}}); err == nil || !strings.Contains(err.Error(), `"Not A Ref"`) {
		t.Errorf("a bad reference: %v, want an error naming it", err)
	}
	set := report.RequiredSet{Images: []report.RequiredImage{
		{Ref: "nginx:1.27", UsedBy: []string{"Deployment web/front containers/nginx"}},
		{Ref: "registry.example.com/app:1", UsedBy: []string{"Deployment shop/app containers/app"}},
		{Ref: "redis:7", UsedBy: []string{"StatefulSet shop/cache containers/redis"}},
	}}
	if err := a.SetRequired(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	rep := a.Report(0)
	r := rep.Required
	if !r.Known || r.Ready || r.Counts["pinned"] != 1 || r.Counts["present"] != 1 || r.Counts["missing"] != 1 {
		t.Fatalf("required %+v, want known, not ready, 1 pinned, 1 present, 1 missing", r)
	}
	if len(r.NotReady) != 2 || r.NotReady[0].Ref != "docker.io/library/redis:7" || r.NotReady[0].State != "missing" ||
		r.NotReady[1].Ref != "registry.example.com/app:1" || r.NotReady[1].UsedBy[0] != "Deployment shop/app containers/app" {
		t.Errorf("not ready %+v", r.NotReady)
	}
	text, ok := a.Held()
	held, err := report.ParseHeld(text)
	if !ok || err != nil || len(held) != 2 || held[0].Name != "docker.io/library/nginx:1.27" || !held[0].Pinned ||
		held[1].Name != "registry.example.com/app:1" || held[1].Pinned || held[1].Digest != d.String() || r.HeldHash != held.Hash() {
		t.Errorf("held %q (%v, %v), hash %s", text, ok, err, r.HeldHash)
	}
	if ev := eventsOf(rep, journal.ReasonImageMissing); len(ev) != 1 || !strings.Contains(ev[0].Message, "docker.io/library/redis:7 (StatefulSet shop/cache containers/redis)") {
		t.Errorf("missing events %+v", ev)
	}
	if ev := eventsOf(rep, journal.ReasonImageUnpinned); len(ev) != 1 || !strings.Contains(ev[0].Message, "registry.example.com/app:1") {
		t.Errorf("unpinned events %+v", ev)
	}

	// The missing one arrives pinned, the unpinned one gets its pin: the
	// image events alone bring the set to ready.
	rt.Create(rec("docker.io/library/redis:7", true))
	rt.Create(rec("registry.example.com/app:1", true))
	waitFor(t, "the set to be ready", func() bool { return a.Report(0).Required.Ready })
	rep = a.Report(0)
	if rep.Required.Counts["pinned"] != 3 || len(rep.Required.NotReady) != 0 {
		t.Errorf("required %+v, want 3 pinned", rep.Required)
	}
	if ev := eventsOf(rep, journal.ReasonImageReady); len(ev) != 2 {
		t.Errorf("ready events %+v, want one for each image that became pinned", ev)
	}
	if text, _ := a.Held(); rep.Required.HeldHash == r.HeldHash || !strings.Contains(string(text), "p docker.io/library/redis:7\n") {
		t.Errorf("held after the pull: %q, hash %s (was %s)", text, rep.Required.HeldHash, r.HeldHash)
	}
}

// TestRequiredImagesManyAtOnce: when more images change state in one
// judgment than get an event each, one event names some and counts them all.
func TestRequiredImagesManyAtOnce(t *testing.T) {
	t.Parallel()
	a := startReportingAgent(t, fake.New(), dirsConfig(t.TempDir()), newFakeClock())
	var set report.RequiredSet
	for i := range workload.EventEach + 3 {
		set.Images = append(set.Images, report.RequiredImage{Ref: fmt.Sprintf("registry.example.com/app-%d:1", i), UsedBy: []string{"Deployment shop/app containers/app"}})
	}
	if err := a.SetRequired(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	ev := eventsOf(a.Report(0), journal.ReasonImageMissing)
	want := fmt.Sprintf("%d required images are missing on this node", workload.EventEach+3)
	if len(ev) != 1 || !strings.Contains(ev[0].Message, want) || !strings.Contains(ev[0].Message, "registry.example.com/app-0:1 (Deployment shop/app containers/app) is missing") ||
		!strings.HasSuffix(ev[0].Message, " and 3 more") {
		t.Errorf("missing events %+v, want one: %q…", ev, want)
	}
}
