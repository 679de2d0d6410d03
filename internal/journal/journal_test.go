package journal

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/report"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func reasons(evs []report.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason+" "+e.Message)
	}
	return out
}

// TestRepeatedFailureRecordedOnce: a source failing with the same cause pass
// after pass is one event; a new cause is a new event; a source that
// recovered and fails again is a new event; the summary lists what fails now.
func TestRepeatedFailureRecordedOnce(t *testing.T) {
	j := New(16, nil)
	broken := report.Failure{Source: "/images/broken.tar.gz", Error: "unexpected EOF"}
	for range 5 {
		j.Passed(3, 2, []report.Failure{broken})
	}
	r := j.Report(0, true)
	if got, want := reasons(r.Events), []string{"SourceFailed /images/broken.tar.gz: unexpected EOF"}; !slices.Equal(got, want) {
		t.Fatalf("events after 5 passes failing alike: %q, want %q", got, want)
	}
	if !slices.Equal(r.Failing, []report.Failure{broken}) || r.Pinned != 3 || r.Sources != 2 || !r.Ready {
		t.Fatalf("summary %+v", r)
	}

	j.Passed(3, 2, []report.Failure{{Source: broken.Source, Error: "gzip: invalid header"}})
	j.Passed(3, 2, []report.Failure{{Source: broken.Source, Error: "gzip: invalid header"}})
	j.Passed(4, 2, nil) // recovered
	j.Passed(4, 2, []report.Failure{broken})
	r = j.Report(1, true)
	want := []string{
		"SourceFailed /images/broken.tar.gz: gzip: invalid header",
		"SourceFailed /images/broken.tar.gz: unexpected EOF",
	}
	if got := reasons(r.Events); !slices.Equal(got, want) {
		t.Fatalf("events after a new cause and a recovery: %q, want %q", got, want)
	}
	if r.Next != 4 {
		t.Fatalf("next %d, want 4", r.Next)
	}
	j.Passed(4, 1, nil)
	if r := j.Report(0, false); len(r.Failing) != 0 || r.Ready {
		t.Fatalf("after recovery: %+v", r)
	}
}

// TestRingBound: the ring keeps the newest events only; after=N returns those
// above N; next always counts on.
func TestRingBound(t *testing.T) {
	j := New(4, nil)
	for i := 1; i <= 10; i++ {
		j.Record(Normal, ReasonUnpinned, fmt.Sprintf("unpinned n%d", i))
	}
	r := j.Report(0, true)
	var seqs []uint64
	for _, e := range r.Events {
		seqs = append(seqs, e.Seq)
	}
	if !slices.Equal(seqs, []uint64{7, 8, 9, 10}) || r.Next != 11 {
		t.Fatalf("seqs %v next %d, want [7 8 9 10] and 11", seqs, r.Next)
	}
	if r.Events[3].Message != "unpinned n10" || r.Events[3].Type != Normal {
		t.Fatalf("last event %+v", r.Events[3])
	}
	if r := j.Report(8, true); len(r.Events) != 2 || r.Events[0].Seq != 9 {
		t.Fatalf("after=8: %+v", r.Events)
	}
	if r := j.Report(10, true); len(r.Events) != 0 || r.Next != 11 {
		t.Fatalf("after=10: %+v", r)
	}
}

// TestBackoffListed: a name is listed while its heal backoff lasts, and not
// after.
func TestBackoffListed(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	j := New(16, c.now)
	j.Backoff("example.com/a:1", c.t.Add(time.Second))
	j.Backoff("example.com/b:1", c.t.Add(time.Minute))
	if r := j.Report(0, true); !slices.Equal(r.HealBackoff, []string{"example.com/a:1", "example.com/b:1"}) {
		t.Fatalf("healBackoff %v", r.HealBackoff)
	}
	c.t = c.t.Add(time.Second)
	if r := j.Report(0, true); !slices.Equal(r.HealBackoff, []string{"example.com/b:1"}) {
		t.Fatalf("healBackoff %v once a's backoff ended", r.HealBackoff)
	}
}

// TestReportEmptyLists: the lists of an empty journal are [] in JSON, not null.
func TestReportEmptyLists(t *testing.T) {
	r := New(4, nil).Report(0, false)
	if r.Failing == nil || r.HealBackoff == nil || r.Events == nil || r.Next != 1 {
		t.Fatalf("%+v", r)
	}
}
