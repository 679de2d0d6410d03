package workload

import (
	"fmt"
	"slices"
	"testing"

	"github.com/holdfast-project/holdfast/internal/report"
)

// TestChanges: the events of the required images' states, from the last
// judgment's to this one's.
func TestChanges(t *testing.T) {
	set := &report.RequiredSet{Images: []report.RequiredImage{
		{Ref: "docker.io/library/a:1", UsedBy: []string{"Deployment shop/a containers/a"}},
		{Ref: "docker.io/library/b:1", UsedBy: []string{"Deployment shop/b containers/b", "Job shop/b containers/b"}},
		{Ref: "docker.io/library/c:1"},
	}}
	type ev struct{ typ, reason, message string }
	for _, tc := range []struct {
		name      string
		prev, now map[string]report.State
		want      []ev
	}{
		{"nothing changed", map[string]report.State{"docker.io/library/a:1": report.Pinned}, map[string]report.State{"docker.io/library/a:1": report.Pinned}, nil},
		{"first judgment: pinned says nothing, missing and present do",
			nil, map[string]report.State{"docker.io/library/a:1": report.Pinned, "docker.io/library/b:1": report.Missing, "docker.io/library/c:1": report.Present},
			[]ev{
				{"Warning", "ImageMissing", "required image docker.io/library/b:1 (Deployment shop/b containers/b and 1 more) is missing on this node: the kubelet would pull it"},
				{"Warning", "ImageUnpinned", "required image docker.io/library/c:1 is not pinned: the kubelet's image GC may delete it"},
			}},
		{"pinned again, and a mismatch",
			map[string]report.State{"docker.io/library/a:1": report.Missing, "docker.io/library/c:1": report.Pinned},
			map[string]report.State{"docker.io/library/a:1": report.Pinned, "docker.io/library/c:1": report.Mismatch},
			[]ev{
				{"Warning", "ImageMissing", "required image docker.io/library/c:1 is mismatch on this node: the kubelet would pull it"},
				{"Normal", "ImageReady", "required image docker.io/library/a:1 (Deployment shop/a containers/a) is pinned"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []ev
			for _, e := range Changes(set, tc.prev, tc.now) {
				got = append(got, ev{e.Type, e.Reason, e.Message})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}

	// More than EventEach at once: one event names EventEach and counts
	// the others.
	many := &report.RequiredSet{}
	now := map[string]report.State{}
	for i := range EventEach + 3 {
		ref := fmt.Sprintf("docker.io/library/m%d:1", i)
		many.Images = append(many.Images, report.RequiredImage{Ref: ref})
		now[ref] = report.Missing
	}
	got := Changes(many, nil, now)
	want := "8 required images are missing on this node (the kubelet would pull them): docker.io/library/m0:1 is missing, docker.io/library/m1:1 is missing, docker.io/library/m2:1 is missing, docker.io/library/m3:1 is missing, docker.io/library/m4:1 is missing and 3 more"
	if len(got) != 1 || got[0].Message != want || got[0].Type != "Warning" {
		t.Errorf("got %+v\nwant one event %q", got, want)
	}
}
