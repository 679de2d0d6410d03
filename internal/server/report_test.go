package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/report"
)

// TestReport: /report answers the JSON the reporter reads, with the events
// above ?after=N, and refuses an after that is not a number.
func TestReport(t *testing.T) {
	t.Parallel()
	j := journal.New(8, nil)
	j.Passed(42, 7, []report.Failure{{Source: "/var/lib/holdfast/images/broken.tar.gz", Error: "unexpected EOF"}})
	j.Record(journal.Normal, journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	s := New("127.0.0.1:0", nil, nil, nil)
	s.Report(func(after uint64) report.Report { return j.Report(after, true) })
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
	var r report.Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Ready || r.Pinned != 42 || r.Sources != 7 || r.Next != 3 || len(r.Events) != 2 ||
		!slices.Equal(r.Failing, []report.Failure{{Source: "/var/lib/holdfast/images/broken.tar.gz", Error: "unexpected EOF"}}) {
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

// TestRequired: PUT /required from loopback with the owner's token hands the
// decoded set over (204); a body that does not decode, or that the agent
// refuses, is 400 with the cause; a peer that is not loopback is refused
// (403) and nothing is handed over.
func TestRequired(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		handed []report.RequiredSet
	)
	got := func() []report.RequiredSet { mu.Lock(); defer mu.Unlock(); return slices.Clone(handed) }
	s := New("127.0.0.1:0", nil, nil, nil)
	s.Owner(testToken)
	s.Required(func(_ context.Context, set report.RequiredSet) error {
		if len(set.Images) > 0 && set.Images[0].Ref == "bad" {
			return errors.New(`image "bad": invalid reference`)
		}
		mu.Lock()
		handed = append(handed, set)
		mu.Unlock()
		return nil
	})
	_, base, _ := start(t, s)
	put := func(body string) (int, string) {
		req, err := http.NewRequest(http.MethodPut, base+"/required", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := put(`{"images":[{"ref":"docker.io/library/nginx:1.27","usedBy":["Deployment a/b containers/c"]}]}`); code != http.StatusNoContent {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if g := got(); len(g) != 1 || g[0].Images[0].Ref != "docker.io/library/nginx:1.27" || g[0].Images[0].UsedBy[0] != "Deployment a/b containers/c" {
		t.Errorf("handed over %+v", g)
	}
	if code, body := put(`{"images":[{"ref":`); code != http.StatusBadRequest || !strings.Contains(body, "decoding the required set") {
		t.Errorf("a broken body: %d %s", code, body)
	}
	if code, body := put(`{"images":[{"ref":"bad"}]}`); code != http.StatusBadRequest || !strings.Contains(body, `image "bad"`) {
		t.Errorf("a refused set: %d %s", code, body)
	}
	// From another host: the handler itself, with the peer's address.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPut, "/required", strings.NewReader(`{"images":[]}`))
	req.RemoteAddr = "10.42.0.7:51234"
	req.Header.Set("Authorization", "Bearer "+testToken)
	s.mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || len(got()) != 1 {
		t.Errorf("from 10.42.0.7: %d, %d sets handed over", rec.Code, len(got()))
	}
}

// TestHeld: GET /held serves the agent's lines as text; before the agent
// has them, 503 with the cause.
func TestHeld(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		text []byte
	)
	s := New("127.0.0.1:0", nil, nil, nil)
	s.Held(func() ([]byte, bool) { mu.Lock(); defer mu.Unlock(); return text, text != nil })
	_, base, _ := start(t, s)
	if code, body := get(t, base+"/held"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no required set yet") {
		t.Errorf("before: %d %s", code, body)
	}
	mu.Lock()
	text = report.Held{{Name: "docker.io/library/a:1", Digest: "sha256:aa", Pinned: true}}.Text()
	mu.Unlock()
	code, body := get(t, base+"/held")
	if held, err := report.ParseHeld([]byte(body)); code != http.StatusOK || err != nil || len(held) != 1 || !held[0].Pinned {
		t.Errorf("after: %d %q (%v)", code, body, err)
	}
}
