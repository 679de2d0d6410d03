package reconcile

import (
	"reflect"
	"sort"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

func target(s string) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(s), Size: int64(len(s))}
}

func want(name, t string) runtime.Want { return runtime.Want{Name: name, Target: target(t)} }

func lease(id, path, identity string, mtime int64, wants ...runtime.Want) runtime.SourceState {
	return runtime.SourceState{Lease: id, Source: path, Identity: identity, MtimeNs: mtime, Images: wants, Complete: true}
}

var both = map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue, runtime.LabelPinned: runtime.PinnedValue}

func rec(name, t string, labels map[string]string) runtime.Image {
	return runtime.Image{Name: name, Target: target(t), Labels: labels}
}

func present(pairs ...string) map[string]Present {
	m := map[string]Present{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = Present{Path: pairs[i], Identity: pairs[i+1]}
	}
	return m
}

type summary struct {
	Pins      map[string]Reason // name → reason
	PinTarget map[string]string // name → target content
	Unpins    []string
	Releases  map[string]Reason // lease → reason
	Conflicts []string
	Held      []string
}

func summarize(p Plan) summary {
	s := summary{Pins: map[string]Reason{}, PinTarget: map[string]string{}, Releases: map[string]Reason{}}
	for _, pin := range p.Pins {
		s.Pins[pin.Want.Name] = pin.Reason
		s.PinTarget[pin.Want.Name] = string(pin.Want.Target.Digest)
	}
	for _, u := range p.Unpins {
		s.Unpins = append(s.Unpins, u.Name)
	}
	for _, r := range p.Releases {
		s.Releases[r.Lease] = r.Reason
	}
	for _, h := range p.Held {
		s.Held = append(s.Held, h.Lease)
	}
	for _, c := range p.Conflicts {
		s.Conflicts = append(s.Conflicts, c.Name+"<-"+c.Winner.Source)
	}
	sort.Strings(s.Unpins)
	return s
}

func TestDiff(t *testing.T) {
	t.Parallel()
	A := "/images/a.tar"
	B := "/images/b.tar"
	for _, tc := range []struct {
		name      string
		in        Input
		pins      map[string]Reason
		targets   map[string]string // name → target content, checked when set
		unpins    []string
		releases  map[string]Reason
		held      []string // leases
		conflicts []string
	}{
		{
			name: "nothing changed: empty plan",
			in: Input{
				Leases:  []runtime.SourceState{lease("l-a", A, "1", 1, want("x:1", "x1"))},
				Present: present(A, "1"),
				Records: []runtime.Image{rec("x:1", "x1", both)},
			},
		},
		{
			name: "newly imported source: its names are pinned as new",
			in: Input{
				Leases:   []runtime.SourceState{lease("l-a", A, "1", 1, want("x:1", "x1"), want("x@sha", "x1"))},
				Present:  present(A, "1"),
				Imported: map[string]bool{"l-a": true},
			},
			pins: map[string]Reason{"x:1": ReasonNew, "x@sha": ReasonNew},
		},
		{
			name: "record deleted: healed, not new",
			in: Input{
				Leases:  []runtime.SourceState{lease("l-a", A, "1", 1, want("x:1", "x1"))},
				Present: present(A, "1"),
			},
			pins: map[string]Reason{"x:1": ReasonMissing},
		},
		{
			name: "record re-pointed by someone else: drift restored",
			in: Input{
				Leases:  []runtime.SourceState{lease("l-a", A, "1", 1, want("x:1", "x1"))},
				Present: present(A, "1"),
				Records: []runtime.Image{rec("x:1", "other", both)},
			},
			pins:    map[string]Reason{"x:1": ReasonDrift},
			targets: map[string]string{"x:1": "x1"},
		},
		{
			name: "CRI pin label stripped: restored",
			in: Input{
				Leases:  []runtime.SourceState{lease("l-a", A, "1", 1, want("x:1", "x1"))},
				Present: present(A, "1"),
				Records: []runtime.Image{rec("x:1", "x1", map[string]string{runtime.LabelPinned: runtime.PinnedValue})},
			},
			pins: map[string]Reason{"x:1": ReasonLabel},
		},
		{
			name: "source deleted: its names unpinned, its lease released",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-a", A, "1", 1, want("x:1", "x1")),
					lease("l-b", B, "1", 1, want("y:1", "y1")),
				},
				Present: present(B, "1"),
				Records: []runtime.Image{rec("x:1", "x1", both), rec("y:1", "y1", both)},
			},
			unpins:   []string{"x:1"},
			releases: map[string]Reason{"l-a": ReasonGone},
		},
		{
			name: "a name another source still wants is never unpinned",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-a", A, "1", 1, want("x:1", "x1"), want("only-a:1", "a1")),
					lease("l-b", B, "1", 1, want("x:1", "x1")),
				},
				Present: present(B, "1"),
				Records: []runtime.Image{rec("x:1", "x1", both), rec("only-a:1", "a1", both)},
			},
			unpins:   []string{"only-a:1"},
			releases: map[string]Reason{"l-a": ReasonGone},
		},
		{
			name: "an image moved from one archive to another: no unpin, no re-pin",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-a", A, "1", 1, want("x:1", "x1")),
					lease("l-b", B, "1", 2, want("x:1", "x1")),
				},
				Present:  present(B, "1"),
				Imported: map[string]bool{"l-b": true},
				Records:  []runtime.Image{rec("x:1", "x1", both)},
			},
			releases: map[string]Reason{"l-a": ReasonGone},
		},
		{
			name: "records holdfast does not own are never unpinned",
			in: Input{
				Records: []runtime.Image{
					rec("user:1", "u1", map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}),
					rec("plain:1", "p1", nil),
				},
			},
		},
		{
			name: "CRI's own sha256 records are ignored",
			in: Input{
				Records: []runtime.Image{rec("sha256:abcd", "x1", both)},
			},
		},
		{
			name: "same name from two sources: the newest mtime wins and is reported",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-a", A, "1", 100, want("x:1", "old")),
					lease("l-b", B, "1", 200, want("x:1", "new")),
				},
				Present: present(A, "1", B, "1"),
				Records: []runtime.Image{rec("x:1", "old", both)},
			},
			pins:      map[string]Reason{"x:1": ReasonDrift},
			targets:   map[string]string{"x:1": "new"},
			conflicts: []string{"x:1<-" + B},
		},
		{
			name: "archive replaced in place: new lease kept, old released, record switched",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-a1", A, "1", 100, want("x:1", "v1"), want("gone:1", "g1")),
					lease("l-a2", A, "2", 200, want("x:1", "v2")),
				},
				Present:  present(A, "2"),
				Imported: map[string]bool{"l-a2": true},
				Records:  []runtime.Image{rec("x:1", "v1", both), rec("gone:1", "g1", both)},
			},
			pins:     map[string]Reason{"x:1": ReasonNew},
			targets:  map[string]string{"x:1": "v2"},
			unpins:   []string{"gone:1"},
			releases: map[string]Reason{"l-a1": ReasonReplaced},
		},
		{
			name: "archive replaced but its import failed: the old lease and pins stay",
			in: Input{
				Leases:  []runtime.SourceState{lease("l-a1", A, "1", 100, want("x:1", "v1"))},
				Present: present(A, "2"),
				Records: []runtime.Image{rec("x:1", "v1", both)},
			},
		},
		{
			name: "unfinished import's lease is released",
			in: Input{
				Leases:  []runtime.SourceState{{Lease: "l-a", Source: A, Identity: "1"}},
				Present: present(A, "1"),
			},
			releases: map[string]Reason{"l-a": ReasonStale},
		},
		{
			name: "unreadable directory: its sources' pins and leases stay",
			in: Input{
				Leases:  []runtime.SourceState{lease("l-a", A, "1", 1, want("x:1", "x1"))},
				Unknown: func(p string) bool { return p == A },
				Records: []runtime.Image{rec("x:1", "x1", both)},
			},
		},
		{
			name: "source deleted while another is still being written: nothing unpinned or released yet",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-a", A, "1", 1, want("x:1", "x1"), want("only-a:1", "a1")),
				},
				Present: present(B, "1"),
				Unknown: func(p string) bool { return p == B },
				Hold:    func(p string) bool { return p == A },
				Records: []runtime.Image{rec("x:1", "x1", both), rec("only-a:1", "a1", both)},
			},
			held: []string{"l-a"},
		},
		{
			name: "held: a replaced lease whose new lease is complete is still released, a stale one too",
			in: Input{
				Leases: []runtime.SourceState{
					lease("l-b1", B, "1", 1, want("y:1", "y1")),
					lease("l-b2", B, "2", 2, want("y:1", "y2")),
					{Lease: "l-c", Source: "/images/c.tar", Identity: "1"},
				},
				Present:  present(B, "2"),
				Hold:     func(string) bool { return true },
				Imported: map[string]bool{"l-b2": true},
				Records:  []runtime.Image{rec("y:1", "y1", both)},
			},
			pins:     map[string]Reason{"y:1": ReasonNew},
			releases: map[string]Reason{"l-b1": ReasonReplaced, "l-c": ReasonStale},
		},
		{
			name: "a user's pin on an owned record is still unpinned through Unpin (which keeps the user's label)",
			in: Input{
				Records: []runtime.Image{rec("x:1", "x1", map[string]string{
					runtime.LabelCRIPinned: runtime.PinnedValue, runtime.LabelPinned: runtime.PinnedValue, runtime.LabelPriorPin: "true",
				})},
			},
			unpins: []string{"x:1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := summarize(Diff(tc.in))
			if tc.pins == nil {
				tc.pins = map[string]Reason{}
			}
			if tc.releases == nil {
				tc.releases = map[string]Reason{}
			}
			if !reflect.DeepEqual(got.Pins, tc.pins) {
				t.Errorf("pins = %v, want %v", got.Pins, tc.pins)
			}
			for name, content := range tc.targets {
				if got.PinTarget[name] != string(digest.FromString(content)) {
					t.Errorf("pin %s targets %s, want the digest of %q", name, got.PinTarget[name], content)
				}
			}
			if !reflect.DeepEqual(got.Unpins, tc.unpins) {
				t.Errorf("unpins = %v, want %v", got.Unpins, tc.unpins)
			}
			if !reflect.DeepEqual(got.Releases, tc.releases) {
				t.Errorf("releases = %v, want %v", got.Releases, tc.releases)
			}
			if !reflect.DeepEqual(got.Held, tc.held) {
				t.Errorf("held = %v, want %v", got.Held, tc.held)
			}
			if !reflect.DeepEqual(got.Conflicts, tc.conflicts) {
				t.Errorf("conflicts = %v, want %v", got.Conflicts, tc.conflicts)
			}
		})
	}
}

// TestDiffNeverUnpinsWanted checks the central rule over many generated states:
// no name a kept source wants is ever in Unpins.
func TestDiffNeverUnpinsWanted(t *testing.T) {
	t.Parallel()
	names := []string{"a:1", "b:1", "c:1", "d:1"}
	paths := []string{"/i/1.tar", "/i/2.tar", "/i/3.tar"}
	// The low bits say which names each source wants, the high bits which
	// sources are present: independent, so every combination is generated.
	wantBits := len(paths) * len(names)
	for mask := 0; mask < 1<<(wantBits+len(paths)); mask++ {
		var leases []runtime.SourceState
		pres := map[string]Present{}
		for pi, p := range paths {
			var ws []runtime.Want
			for ni, n := range names {
				if mask&(1<<(pi*len(names)+ni)) != 0 {
					ws = append(ws, want(n, n+p))
				}
			}
			leases = append(leases, lease("l"+p, p, "1", int64(pi), ws...))
			if mask&(1<<(wantBits+pi)) != 0 {
				pres[p] = Present{Path: p, Identity: "1"}
			}
		}
		var recs []runtime.Image
		for _, n := range names {
			recs = append(recs, rec(n, "whatever", both))
		}
		plan := Diff(Input{Leases: leases, Present: pres, Records: recs})
		wanted := map[string]bool{}
		for _, l := range leases {
			if _, ok := pres[l.Source]; ok {
				for _, w := range l.Images {
					wanted[w.Name] = true
				}
			}
		}
		for _, u := range plan.Unpins {
			if wanted[u.Name] {
				t.Fatalf("mask %b: %s is wanted but planned for unpin", mask, u.Name)
			}
		}
		if plan.Wanted != len(wanted) {
			t.Fatalf("mask %b: plan wants %d names, the present sources want %d", mask, plan.Wanted, len(wanted))
		}
		for n := range wanted {
			if _, ok := plan.WantedNames[n]; !ok {
				t.Fatalf("mask %b: %s wanted but not in the plan's wanted names", mask, n)
			}
		}
	}
}

func BenchmarkDiff10k(b *testing.B) {
	var leases []runtime.SourceState
	var recs []runtime.Image
	pres := map[string]Present{}
	for s := 0; s < 100; s++ {
		p := "/images/" + string(rune('a'+s%26)) + digest.FromString(string(rune(s))).Encoded()[:8] + ".tar"
		var ws []runtime.Want
		for i := 0; i < 100; i++ {
			n := p + ":" + string(rune('a'+i%26)) + digest.FromString(string(rune(i))).Encoded()[:6]
			ws = append(ws, want(n, n))
			recs = append(recs, rec(n, n, both))
		}
		leases = append(leases, lease("l"+p, p, "1", int64(s), ws...))
		pres[p] = Present{Path: p, Identity: "1"}
	}
	in := Input{Leases: leases, Present: pres, Records: recs}
	b.ResetTimer()
	for b.Loop() {
		if p := Diff(in); !p.Empty() {
			b.Fatal("expected an empty plan")
		}
	}
}
