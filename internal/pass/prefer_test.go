package pass

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// ownLists is a Handoff whose owner gives the references of its lists.
type ownLists struct {
	noHandoff
	peers map[string]PeerRefs
}

func (h ownLists) Peers() map[string]PeerRefs { return h.peers }

// TestPullPrefersTheOwnersHolder: the reference of a list of kind peers is
// pulled from the holder its owner prefers for it (PeerRefs.Prefer), within
// a pass and beside it; a reference of a pull list, and one the owner
// prefers no holder for, is pulled with none.
func TestPullPrefersTheOwnersHolder(t *testing.T) {
	const holder = "http://10.0.0.7:30020"
	for _, background := range []bool{false, true} {
		t.Run(map[bool]string{false: "within", true: "beside"}[background], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				rt := fake.New()
				set := testimage.Stored(t, rt, "example.com/set:1")
				other := testimage.Stored(t, rt, "example.com/other:1")
				plain := testimage.Stored(t, rt, "example.com/plain:1")
				byRef := map[string]hfruntime.Want{set.Name: set, other.Name: other, plain.Name: plain}
				rt.PullFunc = func(ref string) (hfruntime.Want, error) { return byRef[ref], nil }
				own := filepath.Join(dir, "set.txt")
				for path, refs := range map[string]string{own: set.Name + "\n" + other.Name + "\n", filepath.Join(dir, "pull.txt"): plain.Name + "\n"} {
					if err := os.WriteFile(path, []byte(refs), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				h := ownLists{peers: map[string]PeerRefs{own: {Known: true,
					Entries: []source.PullEntry{{Ref: set.Name, Line: 1}, {Ref: other.Name, Line: 2}},
					Prefer:  map[string]string{set.Name: holder}}}}
				cfg := Config{ImageDirs: []string{dir}}
				ctx := context.Background()
				if background {
					p, _ := backgroundRunner(t, rt, cfg)
					p.hand = h
					p.Run(ctx, Options{Memo: true})
					synctest.Wait() // the pulls it asked for are done
				} else {
					New(rt, cfg, WithHandoff(h)).Run(ctx, Options{})
				}
				for ref, want := range map[string][]string{set.Name: {holder}, other.Name: {""}, plain.Name: {""}} {
					if got := rt.Prefers(ref); !slices.Equal(got, want) {
						t.Errorf("pulls of %s preferred %q, want %q", ref, got, want)
					}
				}
			})
		})
	}
}
