package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// cosignBin is the cosign make deps builds (scripts/cosign.sh).
func cosignBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("cosign")
	if err != nil {
		testenv.Missing(t, "cosign", "cosign is not on PATH (make deps builds it into bin/): "+err.Error())
	}
	return bin
}

// cosign runs cosign in dir with an empty key password and no network but
// the local registry's; it fails t unless cosign succeeds.
func cosign(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(cosignBin(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=", "COSIGN_YES=true", "SIGSTORE_NO_CACHE=true", "TUF_ROOT="+filepath.Join(dir, "tuf"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestCosignSignedLayouts: images signed by cosign itself (cosign sign
// --key, no transparency log) in a local registry, carried across with
// cosign save, each imported with holdfast import --name under a policy:
// under enforce the one signed by the policy's key is pinned, the one signed
// by another key and the unsigned one are refused, named nowhere, each with
// its reason; under warn all three are pinned and status gives each verdict.
func TestCosignSignedLayouts(t *testing.T) {
	cosignBin(t)
	dir := tempDir(t)
	_, host := startRegistry(t)
	cosign(t, dir, "generate-key-pair", "--output-key-prefix", "platform")
	cosign(t, dir, "generate-key-pair", "--output-key-prefix", "other")

	type signedImage struct {
		name, ref, tagRef, key string
	}
	var imgs []signedImage
	for _, c := range []struct{ repo, key string }{{"signed", "platform"}, {"foreign", "other"}, {"bare", ""}} {
		im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cosign/" + c.repo + ":1"}})
		tagRef := host + "/e2e/" + c.repo + ":1"
		ref := host + "/e2e/" + c.repo + "@" + push(t, tagRef, im)
		if c.key != "" {
			cosign(t, dir, "sign", "--key", c.key+".key", "--tlog-upload=false", "--allow-http-registry", ref)
		}
		imgs = append(imgs, signedImage{name: im.Names[0], ref: ref, tagRef: tagRef, key: c.key})
	}
	layouts := map[string]string{}
	for _, im := range imgs {
		l := filepath.Join(dir, "saved", filepath.Base(strings.Split(im.ref, "@")[0]))
		cosign(t, dir, "save", "--allow-http-registry", "--dir", l, im.ref)
		layouts[im.name] = l
	}
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		// The daemons' subtests run at once: each has its own policy file.
		dataDir := filepath.Join(tempDir(t), "data")
		pol := filepath.Join(tempDir(t), "policy.yaml")
		writePol := func(mode string) {
			body := "mode: " + mode + "\nrules:\n  - images: [\"e2e.local/cosign/*\"]\n    keys: [" + filepath.Join(dir, "platform.pub") + "]\n"
			if err := os.WriteFile(pol, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		writePol("enforce")
		for _, im := range imgs {
			res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, "--policy", pol, "--name", im.name, layouts[im.name])
			switch im.key {
			case "platform":
				if res.Code != 0 {
					t.Fatalf("import of %s, signed by the policy's key, exited %d\n%s%s", im.name, res.Code, res.Stdout, res.Stderr)
				}
				if want := im.name + ": signature: verified by " + filepath.Join(dir, "platform.pub"); !strings.Contains(res.Stdout, want) {
					t.Errorf("import does not say %q:\n%s", want, res.Stdout)
				}
				d.requirePinned(t, im.name)
			default:
				want := "image " + im.name + " refused by the signature policy: invalid"
				if im.key == "" {
					want = "image " + im.name + " refused by the signature policy: unsigned"
				}
				if res.Code != 1 || !strings.Contains(res.Stderr, want) {
					t.Errorf("import of %s exited %d, want 1 and %q:\n%s%s", im.name, res.Code, want, res.Stdout, res.Stderr)
				}
				if _, ok := d.record(t, im.name); ok {
					t.Errorf("%s refused, but containerd has a record of that name", im.name)
				}
			}
		}

		// Under warn the kept imports are judged again from what their
		// leases keep: their layouts are not read again.
		writePol("warn")
		noImages := filepath.Join(dataDir, "no-images")
		if err := os.MkdirAll(noImages, 0o755); err != nil {
			t.Fatal(err)
		}
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", noImages, "--policy", pol)
		if res.Code != 0 {
			t.Fatalf("sync under warn exited %d\n%s", res.Code, res.Stderr)
		}
		if !strings.Contains(res.Stdout, "0 imported") {
			t.Errorf("sync read something: %s", res.Stdout)
		}
		st := d.signatureStatus(t, dataDir, noImages, pol)
		states := map[string]string{}
		for _, img := range st.Images {
			if img.Signature != nil {
				states[img.Name] = img.Signature.State
			}
		}
		for _, im := range imgs {
			d.requirePinned(t, im.name)
			want := map[string]string{"platform": "verified", "other": "invalid", "": "unsigned"}[im.key]
			if states[im.name] != want {
				t.Errorf("status under warn: %s %q, want %s", im.name, states[im.name], want)
			}
		}

		// A pull list of the same images: each pull brings the signature
		// the registry holds for it (its .sig tag), and the policy judges
		// the pulled images by them.
		listDir, listData := filepath.Join(tempDir(t), "images"), filepath.Join(tempDir(t), "data")
		if err := os.MkdirAll(listDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, im := range imgs {
			lines = append(lines, im.tagRef)
		}
		if err := os.WriteFile(filepath.Join(listDir, "pull.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		listPol := filepath.Join(tempDir(t), "policy.yaml")
		if err := os.WriteFile(listPol, []byte("mode: enforce\nrules:\n  - images: [\""+host+"/e2e/*\"]\n    keys: ["+filepath.Join(dir, "platform.pub")+"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res = holdfast(t, "sync", "--address", d.Address, "--data-dir", listData, "--images", listDir, "--policy", listPol)
		if res.Code != 1 {
			t.Fatalf("sync of the pull list under enforce exited %d, want 1\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		for _, im := range imgs {
			switch im.key {
			case "platform":
				d.requirePinned(t, im.tagRef)
			default:
				if rec, ok := d.record(t, im.tagRef); ok {
					t.Errorf("%s refused, but containerd has a record of that name: %+v", im.tagRef, rec)
				}
				if !strings.Contains(res.Stderr, "image "+im.tagRef+" refused by the signature policy") {
					t.Errorf("sync does not say %s is refused:\n%s", im.tagRef, res.Stderr)
				}
			}
		}
	})
}
