package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-project/holdfast/internal/report"
)

// setsServer serves PUT /sets with the owner's token testToken; set refuses
// a set named "bad/name", as the agent refuses a name that is no DNS
// subdomain name, and what it takes is returned by the second function.
func setsServer(t *testing.T) (string, func() []report.StageSets) {
	t.Helper()
	var (
		mu     sync.Mutex
		handed []report.StageSets
	)
	s := New("127.0.0.1:0", nil, nil, nil)
	s.Owner(testToken)
	s.Sets(func(_ context.Context, body report.StageSets) error {
		for _, set := range body.Sets {
			if set.Name == "bad/name" {
				return errors.New(`set name "bad/name": not a DNS subdomain name`)
			}
		}
		mu.Lock()
		handed = append(handed, body)
		mu.Unlock()
		return nil
	})
	_, base, _ := start(t, s)
	return base, func() []report.StageSets { mu.Lock(); defer mu.Unlock(); return slices.Clone(handed) }
}

// putSets PUTs body to base's /sets with the Authorization header auth.
func putSets(t *testing.T, base, auth string, body io.Reader) (int, string) {
	t.Helper()
	code, msg, _ := putPath(t, base, "/sets", auth, body)
	return code, msg
}

// TestSetsNeedsOwner: PUT /sets takes a body only with the owner's token:
// none, or another, is 401 and nothing is handed over; with it, 204 and the
// body is handed over as sent.
func TestSetsNeedsOwner(t *testing.T) {
	t.Parallel()
	base, got := setsServer(t)
	const body = `{"sets":[{"name":"release-7","generation":3,"selected":true,"images":["nginx:1.27"],"mayPull":["nginx:1.27"]}]}`
	for _, auth := range []string{"", "Bearer " + strings.Repeat("0", len(testToken)), "Basic " + testToken} {
		if code, msg := putSets(t, base, auth, strings.NewReader(body)); code != http.StatusUnauthorized {
			t.Errorf("auth %q: %d %s, want 401", auth, code, msg)
		}
	}
	if n := len(got()); n != 0 {
		t.Fatalf("%d bodies handed over without the token", n)
	}
	if code, msg := putSets(t, base, "Bearer "+testToken, strings.NewReader(body)); code != http.StatusNoContent {
		t.Fatalf("with the token: %d %s, want 204", code, msg)
	}
	h := got()
	want := report.StageSet{Name: "release-7", Generation: 3, Selected: true, Images: []string{"nginx:1.27"}, MayPull: []string{"nginx:1.27"}}
	if len(h) != 1 || len(h[0].Sets) != 1 || !equalSet(h[0].Sets[0], want) {
		t.Errorf("handed %+v, want %+v", h, want)
	}
}

func equalSet(a, b report.StageSet) bool {
	return a.Name == b.Name && a.Generation == b.Generation && a.Selected == b.Selected &&
		slices.Equal(a.Images, b.Images) && slices.Equal(a.MayPull, b.MayPull)
}

// TestSetsMalformed: with the token, a body that is not exactly one object
// with a sets list, or is over a bound, or that the setter refuses, is 400
// naming the cause, and nothing is handed over.
func TestSetsMalformed(t *testing.T) {
	t.Parallel()
	base, got := setsServer(t)
	many := func(sets, images int) string {
		var b report.StageSets
		for i := range sets {
			set := report.StageSet{Name: fmt.Sprintf("s%d", i)}
			for j := range images {
				set.Images = append(set.Images, fmt.Sprintf("example.com/i:%d", j))
			}
			b.Sets = append(b.Sets, set)
		}
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	for _, c := range []struct{ body, want string }{
		{``, "decoding the image sets"},
		{`{}`, "no sets list"},
		{`{"sets":null}`, "no sets list"},
		{`{"sets":[],"other":1}`, "unknown field"},
		{`{"sets":[{"name":"a","color":"red"}]}`, "unknown field"},
		{`{"sets":[]} {"sets":[]}`, "more after the body"},
		{many(report.MaxSets+1, 0), "101 sets, more than 100"},
		{many(1, report.MaxSetImages+1), `set "s0": 1001 images, more than 1000`},
		{`{"sets":[{"name":"bad/name","images":[]}]}`, `set name "bad/name": not a DNS subdomain name`},
	} {
		code, msg := putSets(t, base, "Bearer "+testToken, strings.NewReader(c.body))
		if code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%.60s: %d %q, want 400 with %q", c.body, code, msg, c.want)
		}
	}
	// A body over the byte bound is refused before it is read whole.
	big := io.MultiReader(strings.NewReader(`{"sets":[{"name":"a","images":["`), strings.NewReader(strings.Repeat("a", maxSets)), strings.NewReader(`"]}]}`))
	if code, msg := putSets(t, base, "Bearer "+testToken, big); code != http.StatusBadRequest || !strings.Contains(msg, "too large") {
		t.Errorf("a body over %d bytes: %d %.100q, want 400, too large", maxSets, code, msg)
	}
	if n := len(got()); n != 0 {
		t.Errorf("%d malformed bodies handed over", n)
	}
	if code, msg := putSets(t, base, "Bearer "+testToken, strings.NewReader(`{"sets":[]}`)); code != http.StatusNoContent {
		t.Errorf("no sets: %d %s, want 204", code, msg)
	}
}
