package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// phases is the phase of each image of the set name in rep, by reference.
func phases(rep report.Report, name string) (map[string]report.SetImage, bool) {
	for _, s := range rep.Sets {
		if s.Name == name {
			out := map[string]report.SetImage{}
			for _, img := range s.Images {
				out[img.Ref] = img
			}
			return out, true
		}
	}
	return nil, false
}

// TestSets: a selected set's list names the images the waves let the node
// pull and those the store holds (pinned then without a pull), not the
// others (Waiting), and keeps what it started once the waves no longer
// let it; a pass pulls, pins and leases them as the list's; a
// pull that keeps failing is Failed with its error and the time of its
// first failure, a reference that does not parse is Failed and the others
// go on; a set that does not select the node pins nothing and reports only
// what the node holds. A set no longer sent stays listed for the grace
// period, then its file goes and the pass releases what it held, but not
// what a pull list in the images dir also wants.
func TestSets(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	x := testimage.Stored(t, rt, "example.com/x:1")
	held := testimage.Stored(t, rt, "example.com/held:1")
	kept := testimage.Stored(t, rt, "example.com/kept:1")
	other := testimage.Stored(t, rt, "example.com/other:1")
	for _, w := range []hfruntime.Want{held, kept, other} {
		rt.Create(hfruntime.Image{Name: w.Name, Target: w.Target}) // in the store, unpinned
	}
	const (
		waiting = "example.com/waiting:1"
		failing = "example.com/failing:1"
	)
	var (
		mu     sync.Mutex
		pulled []string
	)
	release := make(chan struct{})
	rt.PullFunc = func(ref string) (hfruntime.Want, error) {
		mu.Lock()
		pulled = append(pulled, ref)
		mu.Unlock()
		if ref == x.Name {
			<-release
			return x, nil
		}
		return hfruntime.Want{}, errors.New("no peer serves it")
	}
	images, peers := t.TempDir(), filepath.Join(t.TempDir(), "peers")
	if err := os.WriteFile(filepath.Join(images, "keep.txt"), []byte(kept.Name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := dirsConfig(images, peers)
	cfg.SetLists, cfg.PeerGrace = filepath.Join(peers, "sets"), 10*time.Minute
	list := filepath.Join(cfg.SetLists, "release-7.txt")
	clock := newFakeClock()
	a := startReportingAgent(t, rt, cfg, clock)
	ctx := context.Background()
	if sets := a.Report(0).Sets; sets != nil {
		t.Fatalf("before any body: %+v, want none", sets)
	}

	body := report.StageSets{Sets: []report.StageSet{
		{Name: "release-7", Generation: 3, Selected: true, Images: []string{x.Name, held.Name, kept.Name, waiting, failing, "Not A Ref"},
			MayPull: []string{x.Name, failing}},
		{Name: "elsewhere", Generation: 1, Images: []string{other.Name, kept.Name, x.Name}},
	}}
	if err := a.SetSets(ctx, body); err != nil {
		t.Fatal(err)
	}
	if got, want := listed(t, list), []string{failing, held.Name, kept.Name, x.Name}; !slices.Equal(got, want) {
		t.Fatalf("the set's list names %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(cfg.SetLists, "elsewhere.txt")); !os.IsNotExist(err) {
		t.Errorf("a list of the set that does not select the node: %v", err)
	}
	waitFor(t, "the held image pinned by the set's list", func() bool {
		return pinnedIn(rt, held.Name) && len(leasesFor(t, rt, list)) == 1
	})
	p, _ := phases(a.Report(0), "release-7")
	if p[x.Name].Phase != report.SetPulling || p[waiting].Phase != report.SetWaiting || p[held.Name].Phase != report.SetHeld {
		t.Errorf("while x is pulled: %+v", p)
	}
	if bad := p["Not A Ref"]; bad.Phase != report.SetFailed || !strings.Contains(bad.Error, "Not A Ref") || bad.Since.IsZero() {
		t.Errorf("a reference that does not parse: %+v, want Failed with why", bad)
	}
	// The waves no longer let the node start x or failing: what it started
	// goes on.
	started := body
	started.Sets = slices.Clone(body.Sets)
	started.Sets[0].MayPull = nil
	if err := a.SetSets(ctx, started); err != nil {
		t.Fatal(err)
	}
	if got, want := listed(t, list), []string{failing, held.Name, kept.Name, x.Name}; !slices.Equal(got, want) {
		t.Fatalf("once started, the set's list names %v, want %v", got, want)
	}
	close(release)
	waitFor(t, "x pinned and the pull of failing failed its tries", func() bool {
		clock.Advance(time.Second)
		p, _ := phases(a.Report(0), "release-7")
		return pinnedIn(rt, x.Name) && p[x.Name].Phase == report.SetHeld && p[failing].Phase == report.SetFailed
	})
	rep := a.Report(0)
	p, _ = phases(rep, "release-7")
	since := p[failing].Since
	if f := p[failing]; !strings.Contains(f.Error, "no peer serves it") || since.IsZero() {
		t.Errorf("the failing pull: %+v", f)
	}
	if len(rep.Sets) != 2 || rep.Sets[0].Name != "elsewhere" || rep.Sets[0].Selected || rep.Sets[1].Generation != 3 || len(p) != 6 {
		t.Errorf("sets %+v, want elsewhere then release-7 (6 images)", rep.Sets)
	}
	if e, _ := phases(rep, "elsewhere"); len(e) != 2 || e[x.Name].Phase != report.SetHeld || e[kept.Name].Phase != report.SetHeld {
		t.Errorf("the set that does not select the node: %+v, want only the two held", e)
	}
	if pinnedIn(rt, other.Name) {
		t.Error("an image of a set that does not select the node was pinned")
	}
	clock.Advance(time.Minute)
	if err := a.SetSets(ctx, body); err != nil {
		t.Fatal(err)
	}
	if p, _ := phases(a.Report(0), "release-7"); !p[failing].Since.Equal(since) {
		t.Errorf("a failure's since moved: %v, want %v", p[failing].Since, since)
	}
	mu.Lock()
	if slices.Contains(pulled, waiting) || slices.Contains(pulled, held.Name) || slices.Contains(pulled, other.Name) {
		t.Errorf("pulled %v: the waiting, held or other image", pulled)
	}
	mu.Unlock()

	// The set is no longer sent: its list stays for the grace period.
	body.Sets = body.Sets[1:]
	if err := a.SetSets(ctx, body); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Minute)
	if err := a.SetSets(ctx, body); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, list); len(got) != 4 || !pinnedIn(rt, x.Name) {
		t.Fatalf("within the grace period the list names %v (x pinned: %v), want all four", got, pinnedIn(rt, x.Name))
	}
	waitFor(t, "the set's list removed after the grace period", func() bool {
		clock.Advance(30 * time.Second)
		_, err := os.Stat(list)
		return os.IsNotExist(err)
	})
	waitFor(t, "x unpinned and the list's lease released", func() bool {
		return !pinnedIn(rt, x.Name) && !pinnedIn(rt, held.Name) && len(leasesFor(t, rt, list)) == 0
	})
	if !pinnedIn(rt, kept.Name) {
		t.Error("an image a pull list in the images dir wants was unpinned with the set")
	}
	if _, ok := phases(a.Report(0), "release-7"); ok {
		t.Error("the set no longer sent is still reported")
	}
}

// TestSetsBadName: a set name that is no DNS subdomain name refuses the
// body whole, naming it; nothing is taken or written.
func TestSetsBadName(t *testing.T) {
	t.Parallel()
	peers := filepath.Join(t.TempDir(), "peers")
	cfg := dirsConfig(peers)
	cfg.SetLists = filepath.Join(peers, "sets")
	a := newAgent(fake.New(), cfg, nil, newFakeClock())
	for _, name := range []string{"../x", "a/b", "", "Upper", "a..b", ".a", "a.", "-a", "a-", "a_b", strings.Repeat("a", 254)} {
		body := report.StageSets{Sets: []report.StageSet{{Name: "good", Selected: true, Images: []string{"example.com/x:1"}, MayPull: []string{"example.com/x:1"}}, {Name: name}}}
		if err := a.SetSets(context.Background(), body); err == nil || !strings.Contains(err.Error(), "not a DNS subdomain name") {
			t.Errorf("set name %q: %v, want refused", name, err)
		}
	}
	if err := a.SetSets(context.Background(), report.StageSets{Sets: []report.StageSet{{Name: "a"}, {Name: "a"}}}); err == nil {
		t.Error("a set named twice was taken")
	}
	if a.Report(0).Sets != nil {
		t.Error("a refused body was taken")
	}
	if _, err := os.Stat(cfg.SetLists); !os.IsNotExist(err) {
		t.Errorf("the lists' dir after refused bodies: %v, want none", err)
	}
	for _, name := range []string{"a", "release-7", "a.b-c.9", strings.Repeat("a", 253)} {
		if err := validSetName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

// TestSetsBeforeFirstBody: after a restart, until the reporter's first
// body, a set's list on disk stays as it is and nothing on it is pulled or
// pinned anew, though its image is in the store; the pass takes it from
// the agent as a list of kind peers, every reference only kept.
func TestSetsBeforeFirstBody(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	x := testimage.Stored(t, rt, "example.com/x:1")
	rt.Create(hfruntime.Image{Name: x.Name, Target: x.Target})
	rt.PullFunc = func(ref string) (hfruntime.Want, error) { return hfruntime.Want{}, errors.New("no pull expected") }
	peers := filepath.Join(t.TempDir(), "peers")
	cfg := dirsConfig(peers)
	cfg.SetLists, cfg.PeerGrace = filepath.Join(peers, "sets"), time.Minute
	list := filepath.Join(cfg.SetLists, "release-7.txt")
	if err := writeList(list, setHeader("release-7"), []string{x.Name}, false); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	a := startReportingAgent(t, rt, cfg, clock)
	refs := a.Peers()[list]
	if !refs.Known || len(refs.Entries) != 1 || !refs.Keep[x.Name] || refs.Entries[0].Line != 3 {
		t.Errorf("the pass is given %+v, want x, only kept", refs)
	}
	clock.Advance(time.Hour)
	a.sets.judge(context.Background())
	if after, err := os.ReadFile(list); err != nil || string(after) != string(before) {
		t.Errorf("the list before the first body: %q (%v), want %q", after, err, before)
	}
	if pinnedIn(rt, x.Name) || leasedBy(t, rt, list, x.Name) {
		t.Error("a line of the list on disk was pinned or leased before the first body")
	}
	if a.Report(0).Sets != nil {
		t.Error("sets reported before the first body")
	}
}

// TestSetsLeaveThePeerList: the lists of the sets and the peer source are
// given to passes side by side, each by its path.
func TestSetsLeaveThePeerList(t *testing.T) {
	t.Parallel()
	peers := filepath.Join(t.TempDir(), "peers")
	cfg := Config{Config: pass.Config{PeerList: filepath.Join(peers, "required.txt")}, PullRequired: true, PeerGrace: time.Minute,
		SetLists: filepath.Join(peers, "sets")}
	if err := writePeerList(cfg.PeerList, []string{"example.com/r:1"}); err != nil {
		t.Fatal(err)
	}
	a := newAgent(fake.New(), cfg, nil, newFakeClock())
	body := report.StageSets{Sets: []report.StageSet{{Name: "s", Selected: true, Images: []string{"example.com/s:1"}, MayPull: []string{"example.com/s:1"}}}}
	if err := a.SetSets(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	got := a.Peers()
	r, s := got[cfg.PeerList], got[filepath.Join(cfg.SetLists, "s.txt")]
	if len(got) != 2 || len(r.Entries) != 1 || r.Entries[0].Ref != "example.com/r:1" || len(s.Entries) != 1 || s.Entries[0].Ref != "example.com/s:1" || s.Keep["example.com/s:1"] {
		t.Errorf("lists given to a pass: %+v", got)
	}
	if got := listed(t, cfg.PeerList); !slices.Equal(got, []string{"example.com/r:1"}) {
		t.Errorf("the peer list names %v", got)
	}
}

// leasedBy says whether a lease of the source at path wants name.
func leasedBy(t *testing.T, rt *fake.Runtime, path, name string) bool {
	t.Helper()
	states, err := rt.Sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.Source == path && slices.ContainsFunc(st.Images, func(w hfruntime.Want) bool { return w.Name == name }) {
			return true
		}
	}
	return false
}

// refusingPulls says every reference's pull is fine and the policy refused
// one.
type refusingPulls struct{ refused string }

func (refusingPulls) PullFailure(string) error { return nil }
func (r refusingPulls) Refusal(ref string) string {
	if ref == r.refused {
		return "no signature by the release key"
	}
	return ""
}

// TestSetPhaseRefused: an image of a set that the policy refused is Failed
// with the reason, cut to report.MaxSetError bytes; another listed one is
// Pulling.
func TestSetPhaseRefused(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dir := t.TempDir()
	s := newSets(fake.New(), Config{SetLists: dir, PeerGrace: time.Minute}, refusingPulls{refused: "example.com/bad:1"}, func() {}, clock, slog.New(slog.DiscardHandler))
	body := report.StageSets{Sets: []report.StageSet{{Name: "s", Selected: true,
		Images: []string{"example.com/bad:1", "example.com/ok:1"}, MayPull: []string{"example.com/bad:1", "example.com/ok:1"}}}}
	if err := s.take(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	st := s.forReport()
	if len(st) != 1 || len(st[0].Images) != 2 {
		t.Fatalf("states %+v", st)
	}
	bad, ok := st[0].Images[0], st[0].Images[1]
	if bad.Phase != report.SetFailed || bad.Error != "refused by the signature policy: no signature by the release key" || !bad.Since.Equal(clock.Now()) {
		t.Errorf("the refused image: %+v", bad)
	}
	if ok.Phase != report.SetPulling || ok.Error != "" {
		t.Errorf("the other image: %+v", ok)
	}
	long := strings.Repeat("é", report.MaxSetError)
	if c := cutError(long); len(c) > report.MaxSetError || !strings.HasPrefix(long, c) || len(c) < report.MaxSetError-1 {
		t.Errorf("cut to %d bytes", len(c))
	}
}

// TestSetsPullFromTheHolder: an image of a set is pulled from the holder
// the reporter sends for it (StageSet.From, its reference as the set
// writes it), one without a holder from none; the report names the node's
// own peer mirror for the waves to send others to.
func TestSetsPullFromTheHolder(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	x := testimage.Stored(t, rt, "example.com/x:1")
	y := testimage.Stored(t, rt, "example.com/y:1")
	rt.PullFunc = func(ref string) (hfruntime.Want, error) {
		return map[string]hfruntime.Want{x.Name: x, y.Name: y}[ref], nil
	}
	peers := filepath.Join(t.TempDir(), "peers")
	cfg := dirsConfig(t.TempDir(), peers)
	cfg.SetLists, cfg.PeerGrace, cfg.PeerMirror = filepath.Join(peers, "sets"), time.Minute, "http://[fd00::9]:30020"
	a := startReportingAgent(t, rt, cfg, newFakeClock())
	if got := a.Report(0).PeerMirror; got != cfg.PeerMirror {
		t.Errorf("the report names the peer mirror %q, want %q", got, cfg.PeerMirror)
	}
	const holder = "http://10.0.0.7:30020"
	body := report.StageSets{Sets: []report.StageSet{{Name: "release-8", Generation: 1, Selected: true,
		Images: []string{"example.com/x:1", y.Name}, MayPull: []string{x.Name, y.Name},
		From: map[string]string{" example.com/x:1": holder, "example.com/elsewhere:1": "http://10.0.0.8:30020"}}}}
	if err := a.SetSets(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "x and y pinned by the set's list", func() bool { return pinnedIn(rt, x.Name) && pinnedIn(rt, y.Name) })
	if got := rt.Prefers(x.Name); len(got) == 0 || slices.ContainsFunc(got, func(p string) bool { return p != holder }) {
		t.Errorf("the pulls of x preferred %q, want %s each", got, holder)
	}
	if got := rt.Prefers(y.Name); len(got) == 0 || slices.ContainsFunc(got, func(p string) bool { return p != "" }) {
		t.Errorf("the pulls of y preferred %q, want no holder", got)
	}
	// The report says which holder served x (the waves count it), none for y; nor for z, held before the set
	// named it, even when a later body sends it to a holder.
	z := testimage.Stored(t, rt, "example.com/z:1")
	rt.Create(hfruntime.Image{Name: z.Name, Target: z.Target}) // in the store, unpinned
	body.Sets[0].Images = append(body.Sets[0].Images, z.Name)
	body.Sets[0].MayPull, body.Sets[0].From = []string{z.Name}, map[string]string{z.Name: holder}
	if err := a.SetSets(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "z pinned by the set's list", func() bool { return pinnedIn(rt, z.Name) })
	p, _ := phases(a.Report(0), "release-8")
	if p[x.Name].Phase != report.SetHeld || p[x.Name].From != holder || p[y.Name].From != "" || p[z.Name].Phase != report.SetHeld || p[z.Name].From != "" {
		t.Errorf("the report says %+v; want x held from %s, y and z from none", p, holder)
	}
}

// TestSetsNoWriteThroughLinks: a set's list is never written through a symlink someone placed where its
// directory lies (the write would land wherever it points), nor into a directory another user owns; the
// agent says so, and writes nothing there. Another user's directory is refused only as root can make one.
func TestSetsNoWriteThroughLinks(t *testing.T) {
	t.Parallel()
	body := report.StageSets{Sets: []report.StageSet{{Name: "lab", Selected: true, Images: []string{"example.com/x:1"}, MayPull: []string{"example.com/x:1"}}}}
	elsewhere := t.TempDir()
	peers := filepath.Join(t.TempDir(), "peers")
	if err := os.MkdirAll(peers, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(peers, "sets")); err != nil {
		t.Fatal(err)
	}
	cfg := dirsConfig(peers)
	cfg.SetLists = filepath.Join(peers, "sets")
	a := newAgent(fake.New(), cfg, nil, newFakeClock())
	if err := a.SetSets(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("a set's list written through the symlink: %v", entries)
	}
	if err := writeList(filepath.Join(cfg.SetLists, "lab.txt"), setHeader("lab"), []string{"example.com/x:1"}, true); err == nil || !strings.Contains(err.Error(), "symlink, not followed") {
		t.Errorf("writing a list through a symlinked directory, even with insecure perms: %v, want refused", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the case of a directory another user owns needs chown")
		return
	}
	theirs := filepath.Join(t.TempDir(), "peers", "sets")
	if err := os.MkdirAll(theirs, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := writeList(filepath.Join(theirs, "lab.txt"), setHeader("lab"), []string{"example.com/x:1"}, false)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("writing a list into a directory nobody owns: %v, want refused", err)
	}
	if entries, _ := os.ReadDir(theirs); len(entries) != 0 {
		t.Errorf("a list written into a directory nobody owns: %v", entries)
	}
}
