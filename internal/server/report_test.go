package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/holdfast-project/holdfast/internal/journal"
)

// TestReport: /report answers the JSON the reporter reads, with the events
// above ?after=N, and refuses an after that is not a number.
func TestReport(t *testing.T) {
	t.Parallel()
	j := journal.New(8, nil)
	j.Passed(42, 7, []journal.Failure{{Source: "/var/lib/holdfast/images/broken.tar.gz", Error: "unexpected EOF"}})
	j.Record(journal.Normal, journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	s := New("127.0.0.1:0", nil, nil, nil)
	s.Report(func(after uint64) journal.Report { return j.Report(after, true) })
	_, base, _ := start(t, s)

	code, body := get(t, base+"/report")
	if code != http.StatusOK {
		t.Fatalf("GET /report: %d %s", code, body)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	for _, key := range []string{"ready", "pinned", "sources", "failing", "healBackoff", "events", "next"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("no %q in %s", key, body)
		}
	}
	var r journal.Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Ready || r.Pinned != 42 || r.Sources != 7 || r.Next != 3 || len(r.Events) != 2 ||
		!slices.Equal(r.Failing, []journal.Failure{{Source: "/var/lib/holdfast/images/broken.tar.gz", Error: "unexpected EOF"}}) {
		t.Fatalf("report %s", body)
	}
	if e := r.Events[0]; e.Seq != 1 || e.Type != "Warning" || e.Reason != "SourceFailed" || e.Time.IsZero() {
		t.Fatalf("first event %+v", e)
	}

	_, body = get(t, base+"/report?after=1")
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Events) != 1 || r.Events[0].Seq != 2 || r.Events[0].Reason != "Unpinned" {
		t.Fatalf("after=1: %s", body)
	}
	if code, body := get(t, base+"/report?after=x"); code != http.StatusBadRequest {
		t.Fatalf("after=x: %d %s", code, body)
	}
}
