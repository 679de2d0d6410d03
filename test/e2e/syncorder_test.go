package e2e

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// TestDirectSyncsBeforeCommit traces `holdfast import` on the direct path,
// and its containerd, with strace: each blob file is synced before it is
// linked into blobs/sha256, and the directory is synced after the links,
// before containerd is asked to record them: no link is still unsynced when
// containerd writes the import's documents, which come after the records.
func TestDirectSyncsBeforeCommit(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is needed (scripts/deps.sh installs it): %v", err)
	}
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		path := filepath.Join(dir, "synced.tar")
		img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/syncorder/app:1"}, Layers: fixture.UniformLayers(6, 1<<20, true, 70)})
		writeArchive(t, path, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, img)
		})
		trace := filepath.Join(dir, "trace")
		detach := traceDaemon(t, strace, d, "rename,renameat,renameat2")
		out, err := exec.Command(strace, "-f", "-ttt", "-T", "-y", "-o", trace, "-e", "trace=fsync,fdatasync,linkat,link",
			holdfastBin, "import", "--address", d.Address, "--data-dir", filepath.Join(dir, "data"), "--write-path=direct", path).CombinedOutput()
		ctrCalls := detach()
		if err != nil {
			t.Fatalf("import under strace: %v\n%s", err, out)
		}
		blobs := filepath.Join(directContentRoot(t, d), "blobs", "sha256")
		synced := map[string]bool{}
		links, dirSyncs, unsyncedLinks := 0, 0, 0
		// containerd renames the import's documents into blobs/sha256 once
		// every held blob is recorded: no link may still be unsynced then.
		calls := append(readStrace(t, trace), ctrCalls...)
		sort.Slice(calls, func(i, j int) bool { return calls[i].start < calls[j].start })
		for _, c := range calls {
			switch {
			case strings.HasPrefix(c.name, "rename") && filepath.Dir(quoted(c, 1)) == blobs:
				if unsyncedLinks != 0 {
					t.Errorf("containerd recorded blobs (%s) while %d links into %s were not synced", c.line, unsyncedLinks, blobs)
					unsyncedLinks = 0
				}
			case c.name == "fsync" || c.name == "fdatasync":
				p := fdPath(c)
				synced[p] = true
				if p == blobs {
					dirSyncs++
					unsyncedLinks = 0
				}
			case strings.HasPrefix(c.name, "link") && filepath.Dir(quoted(c, 1)) == blobs:
				if strings.Contains(c.line, "EEXIST") {
					continue
				}
				links++
				unsyncedLinks++
				if src := quoted(c, 0); !synced[src] {
					t.Errorf("%s was linked before it was synced", src)
				}
			}
		}
		if links == 0 {
			t.Fatalf("no blob was linked into %s (%d calls traced)", blobs, len(calls))
		}
		if dirSyncs == 0 || unsyncedLinks != 0 {
			t.Errorf("%d links into %s, %d syncs of it, %d links after the last sync", links, blobs, dirSyncs, unsyncedLinks)
		}
		t.Logf("%d links into %s, %d syncs of it", links, blobs, dirSyncs)
	})
}

// straceCall is one system call in a trace written with -ttt -T -y.
type straceCall struct {
	pid        string
	name       string
	start, end float64 // seconds
	line       string
}

// readStrace reads the completed calls of a trace (-f -ttt -T -y); the
// halves of an interrupted call are joined.
func readStrace(t *testing.T, path string) []straceCall {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []straceCall
	pending := map[string]string{} // pid -> the first half of an unfinished call
	for _, line := range strings.Split(string(b), "\n") {
		pid, tail, _ := strings.Cut(strings.TrimSpace(line), " ")
		ts, rest, ok := strings.Cut(strings.TrimSpace(tail), " ") // strace pads the pid
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		start, err := strconv.ParseFloat(ts, 64)
		if err != nil {
			continue
		}
		if strings.HasSuffix(rest, "<unfinished ...>") {
			pending[pid] = ts + " " + strings.TrimSuffix(rest, "<unfinished ...>")
			continue
		}
		if strings.HasPrefix(rest, "<... ") {
			first, ok := pending[pid]
			if !ok {
				continue
			}
			delete(pending, pid)
			i := strings.Index(rest, "resumed>")
			if i < 0 {
				continue
			}
			ts0, call, _ := strings.Cut(first, " ")
			rest = call + rest[i+len("resumed>"):]
			if start, err = strconv.ParseFloat(ts0, 64); err != nil {
				continue
			}
		}
		i, j := strings.LastIndex(rest, "<"), strings.LastIndex(rest, ">")
		if i < 0 || j != len(rest)-1 {
			continue
		}
		dur, err := strconv.ParseFloat(rest[i+1:j], 64)
		if err != nil {
			continue
		}
		name, _, ok := strings.Cut(rest, "(")
		if !ok {
			continue
		}
		out = append(out, straceCall{pid: pid, name: name, start: start, end: start + dur, line: rest})
	}
	return out
}

// fdPath is the path strace -y shows for the first argument of a call on a
// file descriptor ("fsync(5</a/b>)" is /a/b).
func fdPath(c straceCall) string {
	i, j := strings.Index(c.line, "<"), strings.Index(c.line, ">")
	if i < 0 || j < i {
		return ""
	}
	return c.line[i+1 : j]
}

// quoted is the n-th quoted argument of a call (from 0).
func quoted(c straceCall, n int) string {
	parts := strings.Split(c.line, "\"")
	if len(parts) < 2*n+3 {
		return ""
	}
	return parts[2*n+1]
}

// TestSpoolDeletedOnlyWhenDurable traces containerd and `holdfast sync
// --spool` with strace, on both write paths: a spool file is deleted only
// once every blob of its image was synced before it was put in place
// (containerd's rename out of its ingest dir, or holdfast's link), the blobs
// directory was synced after the last of them, and containerd had synced
// its metadata (meta.db) after that. containerd 1.6 does not sync the
// directory after a commit: holdfast does, at the end of each import.
func TestSpoolDeletedOnlyWhenDurable(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is needed (scripts/deps.sh installs it): %v", err)
	}
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		for i, wp := range []string{"stream", "direct"} {
			t.Run(wp, func(t *testing.T) {
				dir := tempDir(t)
				spoolDir, imagesDir := filepath.Join(dir, "spool"), filepath.Join(dir, "images")
				if err := os.MkdirAll(imagesDir, 0o755); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(spoolDir, "spooled.tar")
				img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/spooldurable/" + wp + ":1"}, Layers: fixture.UniformLayers(3, 256<<10, true, 80+int64(i))})
				writeDockerSave(t, file, img)
				past := time.Now().Add(-time.Hour)
				if err := os.Chtimes(file, past, past); err != nil {
					t.Fatal(err)
				}
				root := directContentRoot(t, d)
				blobsDir := filepath.Join(root, "blobs", "sha256")
				metaDB := filepath.Join(filepath.Dir(root), "io.containerd.metadata.v1.bolt", "meta.db")

				hfTrace := filepath.Join(dir, "holdfast.trace")
				detach := traceDaemon(t, strace, d, "fsync,fdatasync,rename,renameat,renameat2")
				out, err := exec.Command(strace, "-f", "-ttt", "-T", "-y", "-o", hfTrace, "-e", "trace=fsync,fdatasync,linkat,link,unlink,unlinkat",
					holdfastBin, "sync", "--address", d.Address, "--data-dir", filepath.Join(dir, "data"), "--images", imagesDir,
					"--spool", spoolDir, "--write-path="+wp).CombinedOutput()
				ctrCalls := detach()
				if err != nil {
					t.Fatalf("sync under strace: %v\n%s", err, out)
				}
				if _, err := os.Stat(file); !os.IsNotExist(err) {
					t.Fatalf("the spool file is still there (%v):\n%s", err, out)
				}

				calls := append(ctrCalls, readStrace(t, hfTrace)...)
				sort.Slice(calls, func(i, j int) bool { return calls[i].start < calls[j].start })
				removed := -1.0
				for _, c := range calls {
					if strings.HasPrefix(c.name, "unlink") && quoted(c, 0) == file {
						removed = c.start
					}
				}
				if removed < 0 {
					b, _ := os.ReadFile(hfTrace)
					var lines []string
					for _, l := range strings.Split(string(b), "\n") {
						if strings.Contains(l, filepath.Base(file)) {
							lines = append(lines, l)
						}
					}
					t.Fatalf("no unlink of %s in the trace:\n%s", file, strings.Join(lines, "\n"))
				}
				want := map[string]bool{}
				m := img.ManifestFor(fixture.HostPlatform())
				want[m.Config.Digest.Encoded()] = true
				for _, l := range m.Layers {
					want[l.Digest().Encoded()] = true
				}
				synced := map[string]float64{} // path -> end of its last sync
				placed := map[string]float64{} // blob -> end of its rename or link
				var lastPlaced, dirSynced, metaSynced float64
				for _, c := range calls {
					switch {
					case c.name == "fsync" || c.name == "fdatasync":
						p := fdPath(c)
						synced[p] = c.end
						if p == blobsDir && c.end > dirSynced && c.end < removed {
							dirSynced = c.end
						}
						if p == metaDB && c.end < removed && c.end > metaSynced {
							metaSynced = c.end
						}
					case strings.HasPrefix(c.name, "rename") || strings.HasPrefix(c.name, "link"):
						src, dst := quoted(c, 0), quoted(c, 1)
						if filepath.Dir(dst) != blobsDir || !want[filepath.Base(dst)] || strings.Contains(c.line, "EEXIST") {
							continue
						}
						if end, ok := synced[src]; !ok || end > c.start {
							t.Errorf("%s was put in place before it was synced: %s", src, c.line)
						}
						placed[filepath.Base(dst)] = c.end
						lastPlaced = max(lastPlaced, c.end)
					}
				}
				for b := range want {
					if at, ok := placed[b]; !ok || at > removed {
						t.Errorf("blob %s: placed at %f (found %v), the spool file deleted at %f", b, at, ok, removed)
					}
				}
				if dirSynced < lastPlaced {
					t.Errorf("%s was not synced between the last blob put in place (%f) and the spool file's deletion (%f)", blobsDir, lastPlaced, removed)
				}
				if metaSynced < lastPlaced {
					t.Errorf("containerd did not sync %s between the last blob put in place (%f) and the spool file's deletion (%f)", metaDB, lastPlaced, removed)
				}
				t.Logf("%d blobs placed; after the last: blobs dir synced at +%.3fs, meta.db at +%.3fs, the spool file deleted at +%.3fs",
					len(placed), dirSynced-lastPlaced, metaSynced-lastPlaced, removed-lastPlaced)
			})
		}
	})
}

// traceDaemon attaches strace to d's containerd, tracing the calls named, and
// returns a func that detaches it and returns what it saw.
func traceDaemon(t *testing.T, strace string, d *daemon, calls string) func() []straceCall {
	t.Helper()
	out := filepath.Join(tempDir(t), "containerd.trace")
	attached := &testenv.Buffer{}
	tracer := exec.Command(strace, "-f", "-ttt", "-T", "-y", "-o", out, "-e", "trace="+calls, "-p", strconv.Itoa(d.PID))
	tracer.Stderr = attached
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "strace attached to containerd", func() bool { return strings.Contains(attached.String(), "attached") })
	return func() []straceCall {
		_ = tracer.Process.Signal(syscall.SIGINT)
		_ = tracer.Wait()
		return readStrace(t, out)
	}
}
