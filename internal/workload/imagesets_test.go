package workload

import (
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/imageset"
)

func imageSet(name string, generation int64, conditions ...imageset.Condition) imageset.ImageSet {
	s := imageset.ImageSet{Spec: imageset.Spec{Images: []string{"a:1", "b:1", "c:1"}}}
	s.Metadata.Name, s.Metadata.Generation = name, generation
	s.Status.Conditions = conditions
	s.Status.Nodes = imageset.NodeCounts{Selected: 4, Staged: 3, Failed: 1}
	s.Status.MissingImages, s.Status.FailureCount = 1, 1
	s.Status.Missing = []imageset.MissingImage{{Image: "b:1", Nodes: 1, NodeNames: []string{"n4"}}}
	s.Status.Failures = []imageset.Failure{{Node: "n4", Image: "b:1", Error: "refused"}}
	return s
}

// TestJudgeSets: a set whose conditions observed its generation is
// current, its conditions and counts as written; one observed at an older
// generation (by any of its conditions), or with no status, is not, and
// says so; the sets come sorted by name.
func TestJudgeSets(t *testing.T) {
	staged := func(gen int64) imageset.Condition {
		return imageset.Condition{Type: imageset.Staged, Status: imageset.False, Reason: "ImagesMissing", Message: "3 of 4", ObservedGeneration: gen}
	}
	progressing := func(gen int64) imageset.Condition {
		return imageset.Condition{Type: imageset.Progressing, Status: imageset.True, Reason: "Failing", ObservedGeneration: gen}
	}
	empty := imageset.ImageSet{}
	empty.Metadata.Name, empty.Metadata.Generation = "a-new", 1
	got := JudgeSets([]imageset.ImageSet{
		imageSet("release-2", 4, staged(4), progressing(4)),
		imageSet("release-1", 4, progressing(4), staged(3)),
		empty,
		imageSet("release-3", 2, progressing(1), staged(2)),
	})
	if len(got) != 4 || got[0].Name != "a-new" || got[1].Name != "release-1" || got[2].Name != "release-2" || got[3].Name != "release-3" {
		t.Fatalf("sets %+v, want 4 by name", got)
	}
	cur := got[2]
	if !cur.Current || cur.Note != "" || cur.Observed != 4 || cur.Generation != 4 || cur.Images != 3 || cur.Staged == nil ||
		cur.Staged.Status != imageset.False || cur.Staged.Reason != "ImagesMissing" || cur.Progressing == nil || cur.Progressing.Reason != "Failing" ||
		cur.Nodes != (imageset.NodeCounts{Selected: 4, Staged: 3, Failed: 1}) || cur.MissingImages != 1 || len(cur.Missing) != 1 ||
		cur.FailureCount != 1 || cur.Failures[0].Node != "n4" {
		t.Errorf("current: %+v", cur)
	}
	for _, s := range []ClusterSet{got[1], got[3]} {
		if s.Current || !strings.Contains(s.Note, "spec at") || !strings.HasSuffix(s.Note, NotAggregated) || s.Staged == nil {
			t.Errorf("%s, older than its spec: %+v", s.Name, s)
		}
	}
	if got[1].Observed != 3 || got[3].Observed != 1 {
		t.Errorf("observed: %d and %d, want the least of each set's conditions", got[1].Observed, got[3].Observed)
	}
	if n := got[0]; n.Current || n.Staged != nil || n.Note != "no status yet: "+NotAggregated {
		t.Errorf("no status: %+v", n)
	}
}
