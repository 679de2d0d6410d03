package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// refusingRegistry answers every request with 401, 404 or 500, by the
// repository's name, and counts the requests.
type refusingRegistry struct {
	host     string
	requests atomic.Int64
}

func startRefusingRegistry(t *testing.T) *refusingRegistry {
	t.Helper()
	r := &refusingRegistry{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		switch {
		case strings.Contains(req.URL.Path, "/denied"):
			w.WriteHeader(http.StatusUnauthorized)
		case strings.Contains(req.URL.Path, "/broken"):
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// hangingUpstream accepts connections and never answers; it counts those
// its clients have not closed yet.
type hangingUpstream struct {
	host     string
	accepted atomic.Int64
	open     atomic.Int64
}

func startHangingUpstream(t *testing.T) *hangingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &hangingUpstream{host: ln.Addr().String()}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			u.open.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c) // read the request, answer nothing
				u.open.Add(-1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return u
}

// TestPullsNeverHoldAPass: under `holdfast run --pull-required`, 100
// required images that no registry gives (one that refuses each with 401,
// 404 or 500; an upstream that accepts connections and never answers) are
// pulled beside the passes: an archive dropped into the images dir is pinned
// while those pulls still fail or hang, and the report still says, per
// image, that its pull failed.
func TestPullsNeverHoldAPass(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		for _, upstream := range []string{"refused", "hanging"} {
			t.Run(upstream, func(t *testing.T) {
				dir := tempDir(t)
				imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
				if err := os.MkdirAll(imagesDir, 0o755); err != nil {
					t.Fatal(err)
				}
				var (
					host  string
					calls func() int64 // requests the upstream has had
					busy  func() bool  // pulls are failing or hanging right now
				)
				if upstream == "refused" {
					r := startRefusingRegistry(t)
					host, calls = r.host, r.requests.Load
					busy = func() bool { return r.requests.Load() > 0 }
				} else {
					u := startHangingUpstream(t)
					host, calls = u.host, u.accepted.Load
					busy = func() bool { return u.open.Load() > 0 }
				}
				var refs []string
				for i := range 100 {
					repo := []string{"denied", "missing", "broken"}[i%3]
					refs = append(refs, fmt.Sprintf(`{"ref":"%s/%s/img-%03d:1"}`, host, repo, i))
				}
				a := startAgent(t, d, dataDir, []string{imagesDir}, "--pull-required")
				a.put(t, "/required", `{"images":[`+strings.Join(refs, ",")+`]}`)
				eventually(t, "the pulls to reach the "+upstream+" upstream", busy)

				// A name of its own: the other case's agent pinned its image in this containerd.
				app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/beside/" + upstream + ":1"}})
				callsAtDrop := calls()
				dropped := time.Now()
				writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), app)
				deadline := dropped.Add(60 * time.Second)
				for !d.isPinned(t, app.Names[0]) {
					if time.Now().After(deadline) {
						t.Fatalf("the archive was not pinned within 60 s of being dropped beside 100 %s pulls (%d upstream requests)\n%s",
							upstream, calls(), tail(a.dump(), 20))
					}
					time.Sleep(50 * time.Millisecond)
				}
				took := time.Since(dropped)
				stillBusy, callsAtPin := busy(), calls()
				t.Logf("%s: the archive was pinned %s after it was dropped; upstream requests %d at the drop, %d at the pin",
					upstream, took.Round(time.Millisecond), callsAtDrop, callsAtPin)
				if upstream == "hanging" && !stillBusy {
					t.Errorf("no pull was hanging when the archive was pinned: the pass waited for them")
				}
				// The pulls go on after the pin: they were not done when it came.
				eventually(t, "more pulls after the pin", func() bool { return calls() > callsAtPin })

				if upstream == "refused" {
					eventually(t, "the report to give each image's pull error", func() bool {
						r := agentReport(t, a).Required
						if r == nil || len(r.NotReady) != 100 {
							return false
						}
						for _, v := range r.NotReady {
							if !v.Pulling || v.PullError == "" {
								return false
							}
						}
						return true
					})
				}
			})
		}
	})
}

// TestPeerListIsTheAgents: the peer list is the agent's own. A line added by
// hand to <data-dir>/peers/required.txt under a running `holdfast run
// --pull-required` is not pulled, pinned or leased, and the file is written
// back as the agent's list within seconds.
func TestPeerListIsTheAgents(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var (
			mu        sync.Mutex
			requested []string // what holdfast asked for, the pushes done
		)
		reg, host := startRegistry(t)
		inner := reg.Config.Handler
		reg.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				mu.Lock()
				requested = append(requested, r.URL.Path)
				mu.Unlock()
			}
			inner.ServeHTTP(w, r)
		})
		needed := build(t, fixture.ImageSpec{Names: []string{"e2e.local/own/needed:1"}})
		extra := build(t, fixture.ImageSpec{Names: []string{"e2e.local/own/extra:1"}})
		neededRef, extraRef := host+"/own/needed:1", host+"/own/extra:1"
		push(t, neededRef, needed)
		push(t, extraRef, extra)
		mu.Lock()
		requested = nil
		mu.Unlock()

		a := startAgent(t, d, dataDir, []string{imagesDir}, "--pull-required")
		a.put(t, "/required", `{"images":[{"ref":"`+neededRef+`"}]}`)
		eventually(t, "the required image pulled and pinned", func() bool { return d.isPinned(t, neededRef) })
		list := filepath.Join(dataDir, "peers", "required.txt")
		before, err := os.ReadFile(list)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(before), neededRef+"\n") {
			t.Fatalf("the peer list does not name %s:\n%s", neededRef, before)
		}

		f, err := os.OpenFile(list, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintln(f, extraRef); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		edited := time.Now()
		eventually(t, "the hand-added line gone from the peer list", func() bool {
			b, err := os.ReadFile(list)
			return err == nil && string(b) == string(before)
		})
		t.Logf("the peer list was written back %s after the edit", time.Since(edited).Round(time.Millisecond))
		// Two passes more, each brought on by a file of its own (an empty
		// pull list), the second begun after the write-back: none pulled,
		// pinned or leased the added reference.
		for i := range 2 {
			passes := a.logged("pass: ", nil)
			if err := os.WriteFile(filepath.Join(imagesDir, fmt.Sprintf("nudge-%d.txt", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a pass after the write-back", func() bool { return a.logged("pass: ", nil) > passes })
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range requested {
			if strings.Contains(p, "/own/extra/") {
				t.Errorf("the registry was asked for %s: the hand-added line was pulled", p)
			}
		}
		if _, ok := d.record(t, extraRef); ok {
			t.Errorf("%s has a record: the hand-added line was pinned", extraRef)
		}
		if !d.isPinned(t, neededRef) {
			t.Errorf("%s, on the agent's own list, is no longer pinned", neededRef)
		}
	})
}
