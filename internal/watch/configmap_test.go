package watch

import (
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/source"
)

// configMapFiles are the keys of a ConfigMap as the chart writes it.
func configMapFiles(pins string) map[string][]byte {
	return map[string][]byte{"cluster.pins": []byte(pins), source.Marker: []byte("marker\n")}
}

// TestWatcherConfigMapSwap: the kubelet's atomic update of a ConfigMap
// volume (a new timestamped dotdir, "..data_tmp" renamed over "..data", the
// old dotdir removed) is reported as a change of "..data", though dotfiles
// are otherwise ignored; the polling fallback sees the key's new identity.
func TestWatcherConfigMapSwap(t *testing.T) {
	t.Parallel()
	t.Run("inotify", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "cluster")
		if err := fixture.ConfigMapDir(dir, configMapFiles("example.com/a:1\n")); err != nil {
			t.Fatal(err)
		}
		w := startInotify(t, dir)
		if err := fixture.ConfigMapDir(dir, configMapFiles("example.com/b:1\n")); err != nil {
			t.Fatal(err)
		}
		expectNamed(t, w, filepath.Join(dir, "..data"))
	})
	t.Run("polling", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "cluster")
		if err := fixture.ConfigMapDir(dir, configMapFiles("example.com/a:1\n")); err != nil {
			t.Fatal(err)
		}
		w, err := startWatcher([]string{dir}, time.Second, slog.New(slog.DiscardHandler), true)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := fixture.ConfigMapDir(dir, configMapFiles("example.com/b:1\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.Events():
			if !slices.Equal(ev, []string{filepath.Join(dir, "cluster.pins")}) {
				t.Errorf("event %q; want one naming the pin list", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event after the swap")
		}
	})
}
