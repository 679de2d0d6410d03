package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestExportUnderPolicy: with a signature policy, holdfast export names on
// standard error each image the policy refuses (name, digest, why) and
// writes it all the same, exit 0; with --signed-only (or its variable) it
// leaves them out, and holdfast verify under the same policy passes the
// file; a refused image chosen by its digest name alone is refused the
// same way (exit 1, no file); --signed-only without a policy is bad usage;
// and the policy an agent put in force in the namespace (warn) is the one
// export judges by when given none.
func TestExportUnderPolicy(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		s := writeSignedScene(t, imagesDir)
		pol := s.writePolicy(t, "enforce")
		data := filepath.Join(dir, "data")
		if res := holdfast(t, "import", "--address", d.Address, "--data-dir", data, s.archive); res.Code != 0 {
			t.Fatalf("import exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		base := []string{"export", "--address", d.Address, "--data-dir", data}
		refused := func(stderr, name, why, done string) bool {
			rec, ok := d.record(t, name)
			return ok && strings.Contains(stderr, "image "+name+" ("+rec.Target.Digest.String()+") refused by the signature policy: "+why) &&
				strings.Contains(stderr, "; "+done)
		}

		all := filepath.Join(dir, "all.tar.zst")
		res := holdfast(t, append(base, "--policy", pol, "-o", all, "e2e.local/sig/*")...)
		if res.Code != 0 || !refused(res.Stderr, s.bare, "unsigned", "written all the same") || !refused(res.Stderr, s.foreign, "invalid", "written all the same") ||
			strings.Contains(res.Stderr, "image "+s.signed+" (") {
			t.Fatalf("export under the policy exited %d; want 0, the unsigned and the invalid image named\n%s", res.Code, res.Stderr)
		}
		if names := exportedNames(t, all); !slices.Contains(names, s.bare) || !slices.Contains(names, s.foreign) {
			t.Errorf("without --signed-only the archive names %v; want the refused images too", names)
		}
		if v := holdfast(t, "verify", "--policy", pol, all); v.Code != 1 {
			t.Errorf("verify of the whole export exited %d, want 1\n%s", v.Code, v.Stdout)
		}

		signedOnly := func(t *testing.T, out string, res result) {
			t.Helper()
			if res.Code != 0 || !refused(res.Stderr, s.bare, "unsigned", "left out") || !refused(res.Stderr, s.foreign, "invalid", "left out") {
				t.Fatalf("export --signed-only exited %d; want 0, the refused images named as left out\n%s", res.Code, res.Stderr)
			}
			names := exportedNames(t, out)
			for _, n := range names {
				if strings.HasPrefix(n, strings.TrimSuffix(s.bare, ":1")) || strings.HasPrefix(n, strings.TrimSuffix(s.foreign, ":1")) {
					t.Errorf("with --signed-only the archive names %s", n)
				}
			}
			if !slices.Contains(names, s.signed) {
				t.Errorf("with --signed-only the archive names %v; want %s", names, s.signed)
			}
			if v := holdfast(t, "verify", "--policy", pol, out); v.Code != 0 {
				t.Errorf("verify of the --signed-only export exited %d, want 0\n%s%s", v.Code, v.Stdout, v.Stderr)
			}
		}
		out := filepath.Join(dir, "signed.tar.zst")
		signedOnly(t, out, holdfast(t, append(base, "--policy", pol, "--signed-only", "-o", out, "e2e.local/sig/*")...))
		out = filepath.Join(dir, "signed-env.tar.zst")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, holdfastBin, append(base, "--policy", pol, "-o", out, "e2e.local/sig/*")...)
		cmd.Env = append(os.Environ(), "HOLDFAST_SIGNED_ONLY=true")
		signedOnly(t, out, runHoldfast(t, cmd))

		// The bare image by its digest name alone: refused the same way.
		rec, _ := d.record(t, s.bare)
		byDigest := digestName(s.bare, rec.Target.Digest)
		out = filepath.Join(dir, "bare.tar.zst")
		res = holdfast(t, append(base, "--policy", pol, "--signed-only", "-o", out, byDigest)...)
		if res.Code != 1 || !strings.Contains(res.Stderr, "refuses every image chosen") || !strings.Contains(res.Stderr, byDigest) {
			t.Errorf("export --signed-only of %s exited %d; want 1 naming it\n%s", byDigest, res.Code, res.Stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("a refused export left %s (%v)", out, err)
		}

		res = holdfast(t, append(base, "--signed-only", "-o", filepath.Join(dir, "none.tar.zst"), "e2e.local/sig/*")...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "--signed-only needs a signature policy") {
			t.Errorf("--signed-only without a policy exited %d, want 2\n%s", res.Code, res.Stderr)
		}

		// The policy in force: an agent's, in mode warn (it names every
		// image, refused or not), judges an export given no --policy.
		warn := s.writePolicy(t, "warn")
		startAgent(t, d, filepath.Join(dir, "agent"), []string{imagesDir}, "--policy", warn, "--resync", "2s")
		eventually(t, "the unsigned image pinned under warn", func() bool { return d.isPinned(t, s.bare) })
		out = filepath.Join(dir, "in-force.tar.zst")
		res = holdfast(t, append(base, "--signed-only", "-o", out, "e2e.local/sig/*")...)
		if res.Code != 0 || !strings.Contains(res.Stderr, "image "+s.bare+" (") || !strings.Contains(res.Stderr, "not verified by the signature policy (mode warn): unsigned") {
			t.Fatalf("export under the policy in force exited %d; want 0, the unsigned image named\n%s", res.Code, res.Stderr)
		}
		if names := exportedNames(t, out); slices.Contains(names, s.bare) || !slices.Contains(names, s.signed) {
			t.Errorf("under the policy in force with --signed-only the archive names %v", names)
		}
	})
}

// exportedNames are the image names index.json of an export gives.
func exportedNames(t *testing.T, path string) []string {
	t.Helper()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(decodeZstd(t, file)))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s has no index.json: %v", path, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var idx ocispec.Index
		b, err := io.ReadAll(tr)
		if err == nil {
			err = json.Unmarshal(b, &idx)
		}
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range idx.Manifests {
			if n := m.Annotations["io.containerd.image.name"]; n != "" {
				names = append(names, n)
			}
		}
		return names
	}
}
