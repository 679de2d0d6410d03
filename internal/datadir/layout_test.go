package datadir

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLayout: each thing in a data dir has the name that holdfast's
// releases, its docs and the nodes' data dirs have always given it.
func TestLayout(t *testing.T) {
	t.Parallel()
	l := At("/d")
	for got, want := range map[string]string{
		l.Images():         "/d/images",
		l.Pins():           "/d/pins",
		l.LocalPins():      "/d/pins/local.pins",
		l.Peers():          "/d/peers",
		l.PeerList():       "/d/peers/required.txt",
		l.SetLists():       "/d/peers/sets",
		l.SetList("rel-7"): "/d/peers/sets/rel-7.txt",
		l.StateCache():     "/d/state",
		l.Token():          "/d/token",
		l.RegistryConfig(): "/d/registry.d",
		l.Containerd():     "/d/containerd",
		l.IngestOwner():    "/d/ingest-owner",
		l.lockFile():       "/d/lock",
		l.ownerFile():      "/d/owner.json",
	} {
		if got != want {
			t.Errorf("%s; want %s", got, want)
		}
	}
	if got := l.OwnDirs(); !slices.Equal(got, []string{"/d/pins", "/d/peers"}) {
		t.Errorf("OwnDirs = %v", got)
	}
}

// TestImageDirs: the images dirs given, absolute, or the data dir's own
// when none is, then the pins and peers dirs; every dir of the data dir's
// is made.
func TestImageDirs(t *testing.T) {
	t.Parallel()
	l := At(filepath.Join(t.TempDir(), "data"))
	dirs, err := l.ImageDirs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{l.Images(), l.Pins(), l.Peers()}; !slices.Equal(dirs, want) {
		t.Errorf("ImageDirs(nil) = %v; want %v", dirs, want)
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s not made: %v", d, err)
		}
	}
	given, err := filepath.Abs("rel")
	if err != nil {
		t.Fatal(err)
	}
	dirs, err = l.ImageDirs([]string{"rel", "/srv/images"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{given, "/srv/images", l.Pins(), l.Peers()}; !slices.Equal(dirs, want) {
		t.Errorf("ImageDirs(given) = %v; want %v", dirs, want)
	}
}
