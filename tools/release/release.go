package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/oci"
)

// Names of the release's files.
const (
	sumsFile      = "SHA256SUMS"
	bundleSuffix  = ".sigstore.json"
	publicKeyFile = "holdfast-release.pub"
	haulerFile    = "hauler-manifest.yaml"
	zarfFile      = "zarf.yaml"
	unsignedMark  = "-unsigned"
)

// release writes the release into o.Dist and returns the files written,
// relative to it.
func release(o options) ([]string, error) {
	v, _ := fileVersion(o.Version)
	cv := chartVersion(v)
	mark := ""
	if o.Unsigned {
		mark = unsignedMark
	}
	if err := os.MkdirAll(o.Dist, 0o755); err != nil {
		return nil, err
	}
	if err := checkDist(o.Dist); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "holdfast-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	var c *cosign
	if !o.Unsigned {
		if c, err = newCosign(o.Cosign, o.keyRef, work); err != nil {
			return nil, err
		}
	}
	l, err := extractLayout(o.Image, filepath.Join(work, "layout"))
	if err != nil {
		return nil, err
	}
	imageName := l.index.Annotations[oci.AnnotationImageName]
	if _, err := addSBOM(l, filepath.Join(o.SBOMDir, imageSBOM), o.Created); err != nil {
		return nil, err
	}
	if c != nil {
		if err := signLayout(c, l, work); err != nil {
			return nil, err
		}
	}
	imageFile := "holdfast-image-" + v + mark + ".tar"
	if err := l.writeTar(filepath.Join(o.Dist, imageFile), o.Created); err != nil {
		return nil, err
	}
	chartFile := "holdfast-" + v + mark + ".tgz"
	tgz, err := packageChart(o.Helm, o.Chart, work, chartSpec{Version: cv, ImageRepo: oci.Repository(imageName), ImageTag: imageTag(imageName), Digest: l.index.Digest.String()}, o.Created)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(o.Dist, chartFile), tgz); err != nil {
		return nil, err
	}
	spec := bundleSpec{Image: oci.Repository(imageName) + "@" + l.index.Digest.String(), Chart: chartFile, ChartVersion: cv, Version: v,
		Source: o.Source, Verify: sumsFile + ", " + sumsFile + bundleSuffix + ", docs/install-from-a-release.md"}
	if o.Unsigned {
		spec.Verify = sumsFile + unsignedMark + " only: an unsigned release, for tests"
	}
	if err := writeFile(filepath.Join(o.Dist, haulerFile), haulerManifest(spec)); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(o.Dist, zarfFile), zarfPackage(spec)); err != nil {
		return nil, err
	}
	if c != nil {
		if err := signBlob(c, o.Dist, chartFile, work); err != nil {
			return nil, err
		}
		pub := filepath.Join(work, publicKeyFile)
		if err := c.publicKey(pub); err != nil {
			return nil, err
		}
		if err := copyInto(pub, filepath.Join(o.Dist, publicKeyFile)); err != nil {
			return nil, err
		}
	}
	sums := sumsFile + mark
	files, err := writeSums(o.Dist, sums)
	if err != nil {
		return nil, err
	}
	files = append(files, sums)
	if c != nil {
		if err := signBlob(c, o.Dist, sums, work); err != nil {
			return nil, err
		}
		files = append(files, sums+bundleSuffix)
	}
	return files, nil
}

// signLayout pushes the layout's image and its referrers (the SBOM) to a
// registry of this process (which takes only its own credential, in work
// for cosign), signs the image, each of its platform
// manifests and each referrer there, and copies the signatures back into
// the layout as referrers of what they sign.
func signLayout(c *cosign, l *layout, work string) error {
	reg, err := startRegistry()
	if err != nil {
		return err
	}
	defer reg.close()
	creds := filepath.Join(work, "docker")
	if err := reg.dockerConfig(creds); err != nil {
		return err
	}
	c = c.withEnv("DOCKER_CONFIG=" + creds)
	if err := reg.pushImage(l); err != nil {
		return err
	}
	refs := slices.Clone(l.referrers)
	for _, r := range refs {
		if err := reg.pushManifest(l, r); err != nil {
			return err
		}
	}
	if err := c.signImage(reg.ref(l.index.Digest), true); err != nil {
		return err
	}
	for _, r := range refs {
		if err := c.signImage(reg.ref(r.Digest), false); err != nil {
			return err
		}
	}
	ms, err := l.manifests()
	if err != nil {
		return err
	}
	subjects := []digest.Digest{l.index.Digest}
	for _, m := range ms {
		subjects = append(subjects, m.Digest)
	}
	n, err := reg.pullReferrers(context.Background(), l, subjects)
	if err != nil {
		return err
	}
	if want := len(refs) + 1 + len(ms) + len(refs); n != want {
		return fmt.Errorf("the registry holds %d referrers of the image after signing, want %d", n, want)
	}
	return nil
}

// signBlob writes the sigstore bundle of the dist file name beside it.
func signBlob(c *cosign, dist, name, work string) error {
	tmp := filepath.Join(work, filepath.Base(name)+bundleSuffix)
	if err := c.signBlob(filepath.Join(dist, name), tmp); err != nil {
		return err
	}
	return copyInto(tmp, filepath.Join(dist, name+bundleSuffix))
}

// copyInto copies the file from to out (writeAtomic).
func copyInto(from, out string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return writeFile(out, b)
}

// imageTag is the tag of an image name (repo:tag).
func imageTag(name string) string {
	return strings.TrimPrefix(name, oci.Repository(name)+":")
}

// writeSums writes name in dist: the SHA-256 of every other regular file
// under dist (sha256sum -c format: hex, two spaces, the path relative to
// dist with slashes), sorted by path. Hidden files (a write in progress)
// and links are left out. It returns the paths listed.
func writeSums(dist, name string) ([]string, error) {
	var lines, paths []string
	err := filepath.WalkDir(dist, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dist, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(e.Name(), ".") && e.IsDir() {
			return fs.SkipDir
		}
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() || rel == name || rel == name+bundleSuffix {
			return nil
		}
		sum, err := files.SHA256(p)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+rel+"\n")
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	slices.Sort(paths)
	return paths, writeFile(filepath.Join(dist, name), []byte(strings.Join(lines, "")))
}

// checkDist refuses a dist dir that holds anything but the SBOM dir: the
// files of another release would be listed in SHA256SUMS.
func checkDist(dist string) error {
	es, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	var stray []string
	for _, e := range es {
		if e.Name() != "sbom" || !e.IsDir() {
			stray = append(stray, e.Name())
		}
	}
	if len(stray) > 0 {
		return fmt.Errorf("%s holds %s, from another release: remove it, or write into another dir", dist, strings.Join(stray, ", "))
	}
	return nil
}
