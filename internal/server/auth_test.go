package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
)

const testToken = "9f2c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f10"

// requiredServer serves PUT /required with the owner's token testToken (none
// when token is ""); set normalises each reference as the agent does, and
// what it takes is returned by the second function.
func requiredServer(t *testing.T, token string) (*Server, string, func() []report.RequiredSet) {
	t.Helper()
	var (
		mu     sync.Mutex
		handed []report.RequiredSet
	)
	s := New("127.0.0.1:0", nil, nil, nil)
	if token != "" {
		s.Owner(token)
	}
	s.Required(func(_ context.Context, set report.RequiredSet) error {
		for _, img := range set.Images {
			if _, err := pattern.NormalizeRef(img.Ref); err != nil {
				return err
			}
		}
		mu.Lock()
		handed = append(handed, set)
		mu.Unlock()
		return nil
	})
	_, base, _ := start(t, s)
	return s, base, func() []report.RequiredSet { mu.Lock(); defer mu.Unlock(); return slices.Clone(handed) }
}

// putWith PUTs body to base's /required with the Authorization header auth
// (none when empty).
func putWith(t *testing.T, base, auth, body string) (int, string, http.Header) {
	t.Helper()
	return putPath(t, base, "/required", auth, strings.NewReader(body))
}

// putPath PUTs body to base's path with the Authorization header auth (none
// when empty).
func putPath(t *testing.T, base, path, auth string, body io.Reader) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestRequiredNeedsOwner: PUT /required takes a set only with the owner's
// token, from loopback. No header, another token, the token in another
// scheme or cut short, or a server given no token at all: 401 with a
// Bearer challenge, and nothing is handed over. From another host, even with
// the token: 403.
func TestRequiredNeedsOwner(t *testing.T) {
	t.Parallel()
	s, base, got := requiredServer(t, testToken)
	const body = `{"images":[{"ref":"docker.io/library/nginx:1.27"}]}`
	for _, auth := range []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer " + strings.Repeat("0", len(testToken)),
		"Bearer " + testToken[:len(testToken)-1],
		"Bearer " + testToken + "0",
		"Basic " + testToken,
		testToken,
		"Bearer  " + testToken,
	} {
		code, msg, h := putWith(t, base, auth, body)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %d %q (WWW-Authenticate %q), want 401 with a Bearer challenge", auth, code, msg, h.Get("WWW-Authenticate"))
		}
		if strings.Contains(msg, testToken) {
			t.Errorf("Authorization %q: the answer shows the token: %q", auth, msg)
		}
	}
	if g := got(); len(g) != 0 {
		t.Fatalf("sets handed over without the token: %+v", g)
	}
	if code, msg, _ := putWith(t, base, "Bearer "+testToken, body); code != http.StatusNoContent {
		t.Fatalf("with the token: %d %q, want 204", code, msg)
	}
	if g := got(); len(g) != 1 || g[0].Images[0].Ref != "docker.io/library/nginx:1.27" {
		t.Fatalf("handed over %+v", g)
	}
	// Not loopback, with the token: the handler itself, with the peer's address.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPut, "/required", strings.NewReader(body))
	req.RemoteAddr = "10.42.0.7:51234"
	req.Header.Set("Authorization", "Bearer "+testToken)
	s.mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || len(got()) != 1 {
		t.Errorf("from 10.42.0.7 with the token: %d, %d sets handed over; want 403 and none", rec.Code, len(got()))
	}

	// A server that was given no token takes no change at all.
	_, base, got = requiredServer(t, "")
	for _, auth := range []string{"", "Bearer ", "Bearer " + testToken} {
		if code, msg, _ := putWith(t, base, auth, body); code != http.StatusUnauthorized {
			t.Errorf("no token set, Authorization %q: %d %q, want 401", auth, code, msg)
		}
	}
	if g := got(); len(g) != 0 {
		t.Errorf("a server with no token handed over %+v", g)
	}
}

// TestRequiredMalformed: with the token, a body that is not exactly one
// required set of full, valid references is 400 naming the cause, and
// nothing is handed over.
func TestRequiredMalformed(t *testing.T) {
	t.Parallel()
	_, base, got := requiredServer(t, testToken)
	for _, tc := range []struct{ body, cause string }{
		{`null`, "no images list"},
		{`{}`, "no images list"},
		{`{"images":null}`, "no images list"},
		{``, "decoding the required set"},
		{`{"images":[]} {"images":[]}`, "after the required set"},
		{`{"images":[]}{"images":[{"ref":"docker.io/library/a:1"}]}`, "after the required set"},
		{`{"images":[]} x`, "after the required set"},
		{`[]`, "decoding the required set"},
		{`{"images":[],"extra":1}`, `unknown field "extra"`},
		{`{"images":[{"ref":`, "decoding the required set"},
		{`{"images":[{"ref":"sha256:` + strings.Repeat("ab", 32) + `"}]}`, "not a reference"},
		{`{"images":[{"ref":"UPPER/case:v1"}]}`, "lowercase"},
		{`{"images":[{"ref":""}]}`, "empty reference"},
	} {
		code, msg, _ := putWith(t, base, "Bearer "+testToken, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(msg, tc.cause) {
			t.Errorf("body %q: %d %q, want 400 naming %q", tc.body, code, msg, tc.cause)
		}
	}
	if g := got(); len(g) != 0 {
		t.Fatalf("malformed bodies handed over %+v", g)
	}
	// Whitespace after the one value is fine, and an empty set is a set.
	if code, msg, _ := putWith(t, base, "Bearer "+testToken, "{\"images\":[]}\n\t "); code != http.StatusNoContent {
		t.Fatalf("an empty set: %d %q", code, msg)
	}
	if g := got(); len(g) != 1 || g[0].Images == nil || len(g[0].Images) != 0 {
		t.Fatalf("handed over %+v, want one empty set", g)
	}
}
