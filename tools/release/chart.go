package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// chartSpec is what the release sets in the chart.
type chartSpec struct {
	Version   string // Chart.yaml version and appVersion (SemVer)
	ImageRepo string // values.yaml image.repository: the archive's image's
	ImageTag  string // values.yaml image.tag
	Digest    string // values.yaml image.digest: the image index's digest
}

// packageChart copies the chart dir src into work, sets its version, the
// image's tag and digest, packages it with helm and returns the package's
// bytes, normalized: the same entries, each timed at created, owned by 0:0,
// in a gzip stream with no name or time, so the same chart gives the same
// bytes whenever it is packaged.
func packageChart(helm, src, work string, spec chartSpec, created time.Time) ([]byte, error) {
	dir := filepath.Join(work, "chart", filepath.Base(src))
	if err := copyDir(src, dir); err != nil {
		return nil, err
	}
	if err := editFile(filepath.Join(dir, "Chart.yaml"), func(b []byte) ([]byte, error) { return setChartVersion(b, spec.Version) }); err != nil {
		return nil, err
	}
	if err := editFile(filepath.Join(dir, "values.yaml"), func(b []byte) ([]byte, error) { return setImage(b, spec.ImageRepo, spec.ImageTag, spec.Digest) }); err != nil {
		return nil, err
	}
	out := filepath.Join(work, "chart-package")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(helm, "package", dir, "--destination", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("helm package: %v\n%s", err, b)
	}
	es, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	if len(es) != 1 {
		return nil, fmt.Errorf("helm package wrote %d files into %s, want one", len(es), out)
	}
	tgz, err := os.ReadFile(filepath.Join(out, es[0].Name()))
	if err != nil {
		return nil, err
	}
	return normalizeTgz(tgz, created)
}

// copyDir copies the regular files and dirs under src to dst; a link or
// anything else is an error naming it.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(to, 0o755)
		case !e.Type().IsRegular():
			return fmt.Errorf("chart: %s is no regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

func editFile(path string, edit func([]byte) ([]byte, error)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if b, err = edit(b); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return os.WriteFile(path, b, 0o644)
}

var (
	versionLine    = regexp.MustCompile(`(?m)^version:.*$`)
	appVersionLine = regexp.MustCompile(`(?m)^appVersion:.*$`)
)

// setChartVersion sets Chart.yaml's version and appVersion to v, lines
// replaced in place (comments kept).
func setChartVersion(b []byte, v string) ([]byte, error) {
	if !versionLine.Match(b) || !appVersionLine.Match(b) {
		return nil, errors.New("no version: or appVersion: line")
	}
	b = versionLine.ReplaceAllLiteral(b, []byte("version: "+v))
	b = appVersionLine.ReplaceAllLiteral(b, []byte(`appVersion: "`+v+`"`))
	var c struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if c.Version != v || c.AppVersion != v {
		return nil, fmt.Errorf("version %q and appVersion %q after setting them to %q", c.Version, c.AppVersion, v)
	}
	return b, nil
}

// setImage sets values.yaml's image.repository, image.tag and image.digest:
// the lines of the top-level image: block replaced in place (comments
// kept), digest added after tag when the chart has none; then read back.
func setImage(b []byte, repo, tag, digest string) ([]byte, error) {
	lines := strings.SplitAfter(string(b), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimRight(l, " \r\n") == "image:" {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, errors.New("no top-level image: block")
	}
	repoAt, tagAt, digestAt := -1, -1, -1
	for i := start + 1; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "#") {
			break // the next top-level key
		}
		switch {
		case strings.HasPrefix(l, "  repository:"):
			repoAt = i
		case strings.HasPrefix(l, "  tag:"):
			tagAt = i
		case strings.HasPrefix(l, "  digest:"):
			digestAt = i
		}
	}
	if repoAt < 0 || tagAt < 0 {
		return nil, errors.New("no image.repository or no image.tag line")
	}
	lines[repoAt] = fmt.Sprintf("  repository: %q\n", repo)
	lines[tagAt] = fmt.Sprintf("  tag: %q\n", tag)
	if digestAt >= 0 {
		lines[digestAt] = fmt.Sprintf("  digest: %q\n", digest)
	} else {
		lines = append(lines[:tagAt+1], append([]string{fmt.Sprintf("  digest: %q\n", digest)}, lines[tagAt+1:]...)...)
	}
	out := []byte(strings.Join(lines, ""))
	var v struct {
		Image struct{ Repository, Tag, Digest string } `yaml:"image"`
	}
	if err := yaml.Unmarshal(out, &v); err != nil {
		return nil, err
	}
	if v.Image.Repository != repo || v.Image.Tag != tag || v.Image.Digest != digest {
		return nil, fmt.Errorf("image %s:%s@%s after setting it to %s:%s@%s", v.Image.Repository, v.Image.Tag, v.Image.Digest, repo, tag, digest)
	}
	return out, nil
}

// maxChart bounds a chart package read back.
const maxChart = 64 << 20

// normalizeTgz writes the entries of the gzip tar tgz again: the same names,
// modes, types and contents, in the same order, each timed at created and
// owned by 0:0 with no user or group names, in a gzip stream with no name
// or time.
func normalizeTgz(tgz []byte, created time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("the chart package: %w", err)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tr, tw := tar.NewReader(io.LimitReader(zr, maxChart)), tar.NewWriter(zw)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the chart package: %w", err)
		}
		out := &tar.Header{Typeflag: hdr.Typeflag, Name: hdr.Name, Linkname: hdr.Linkname, Size: hdr.Size,
			Mode: hdr.Mode, ModTime: created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(out); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, fmt.Errorf("the chart package: %s: %w", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
