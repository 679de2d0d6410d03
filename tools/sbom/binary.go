package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/holdfast-project/holdfast/internal/files"
	"golang.org/x/mod/modfile"
)

// Bounds of what is read: a go.mod, a generated document, what the generator
// says on failure.
const (
	maxGoMod   = 4 << 20
	maxBOM     = 64 << 20
	maxMessage = 64 << 10
)

// binary is one binary of one platform of the image.
type binary struct {
	Platform platform
	Cmd      string
	Path     string
	Version  string // for the generator's -version; "" keeps the build info's
	SHA256   string // of the file, hex
	BOM      *cdx.BOM
}

func (b *binary) String() string {
	return fmt.Sprintf("%s for %s (%s)", b.Cmd, b.Platform, b.Path)
}

// FileName is the name of the binary's document in the output dir.
func (b *binary) FileName() string {
	return fmt.Sprintf("%s_%s_%s.cdx.json", b.Cmd, b.Platform.OS, b.Platform.Arch)
}

// readGoMod parses the go.mod the binaries of its module are checked against.
func readGoMod(path string) (*modfile.File, error) {
	data, err := readBounded(path, maxGoMod)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s names no module", path)
	}
	return f, nil
}

// inspect reads b's build info: it must be a Go binary of b's platform; a
// binary of gomod's module must link exactly the modules gomod requires.
func (b *binary) inspect(o *options, gomod *modfile.File) error {
	f, err := os.Open(b.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	info, err := buildinfo.Read(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: not a Go binary with build info: %w", b, err)
	}
	goos, goarch := setting(info, "GOOS"), setting(info, "GOARCH")
	if goos != b.Platform.OS || goarch != b.Platform.Arch {
		return fmt.Errorf("%s: built for %s/%s, not %s", b, goos, goarch, b.Platform)
	}
	override, given := o.Versions[b.Cmd]
	switch {
	case info.Main.Path == gomod.Module.Mod.Path:
		if err := checkRequires(info, gomod); err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		b.Version = o.moduleVersion()
		if given {
			b.Version = override
		}
	case given:
		if v := info.Main.Version; v != "" && v != "(devel)" && v != override {
			return fmt.Errorf("%s: its build info names %s %s, not %s", b, info.Main.Path, v, override)
		}
		b.Version = override
	case info.Main.Version == "" || info.Main.Version == "(devel)":
		return fmt.Errorf("%s: its build info names no version of %s: give -version %s=VERSION", b, info.Main.Path, b.Cmd)
	}
	b.SHA256, err = files.SHA256(b.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	return nil
}

func setting(info *debug.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// checkRequires reports the modules info links at another version than gomod
// requires (or replaces it with): the binary was not built from that tree.
func checkRequires(info *debug.BuildInfo, gomod *modfile.File) error {
	required := map[string]string{}
	for _, r := range gomod.Require {
		required[r.Mod.Path] = r.Mod.Version
	}
	replaced := map[string]string{} // old path (and old path@version) -> new path@version
	for _, r := range gomod.Replace {
		key := r.Old.Path
		if r.Old.Version != "" {
			key += "@" + r.Old.Version
		}
		replaced[key] = r.New.Path + "@" + r.New.Version
	}
	var errs []error
	for _, d := range info.Deps {
		want, ok := required[d.Path]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("links %s %s, which %s does not require", d.Path, d.Version, gomod.Syntax.Name))
		case d.Version != want:
			errs = append(errs, fmt.Errorf("links %s %s, %s requires %s", d.Path, d.Version, gomod.Syntax.Name, want))
		case d.Replace != nil:
			got := d.Replace.Path + "@" + d.Replace.Version
			if got != replaced[d.Path+"@"+d.Version] && got != replaced[d.Path] {
				errs = append(errs, fmt.Errorf("links %s replaced by %s, which %s does not say", d.Path, got, gomod.Syntax.Name))
			}
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("not built from this tree: %w", errs[0])
	}
	return fmt.Errorf("not built from this tree: %w (and %d more)", errs[0], len(errs)-1)
}

// generate runs cyclonedx-gomod on b with neither serial number nor time (the
// caller sets both, reproducibly), the Go standard library included.
func (b *binary) generate(o *options, tmp string) error {
	out := filepath.Join(tmp, b.FileName())
	args := []string{"bin", "-json", "-noserial", "-notimestamp", "-std", "-output-version", cdx.SpecVersion1_6.String(), "-output", out}
	if b.Version != "" {
		args = append(args, "-version", b.Version)
	}
	args = append(args, b.Path)
	var stderr bytes.Buffer
	cmd := exec.Command(o.Generator, args...)
	// cyclonedx-gomod qualifies each purl with the GOOS and GOARCH `go env`
	// says, not the binary's: give it the binary's (inspect checked them).
	cmd.Env = append(os.Environ(), "GOOS="+b.Platform.OS, "GOARCH="+b.Platform.Arch)
	cmd.Stderr = &limitedBuffer{buf: &stderr, left: maxMessage}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %s: %w: %s", b, o.Generator, err, bytes.TrimSpace(stderr.Bytes()))
	}
	data, err := readBounded(out, maxBOM)
	if err != nil {
		return fmt.Errorf("%s: reading what %s wrote: %w", b, o.Generator, err)
	}
	b.BOM = new(cdx.BOM)
	if err := cdx.NewBOMDecoder(bytes.NewReader(data), cdx.BOMFileFormatJSON).Decode(b.BOM); err != nil {
		return fmt.Errorf("%s: decoding what %s wrote: %w", b, o.Generator, err)
	}
	if b.BOM.Metadata == nil || b.BOM.Metadata.Component == nil {
		return fmt.Errorf("%s: %s wrote no metadata.component", b, o.Generator)
	}
	qualifiers := fmt.Sprintf("goarch=%s&goos=%s&", b.Platform.Arch, b.Platform.OS)
	if purl := b.BOM.Metadata.Component.PackageURL; !strings.Contains(purl, qualifiers) {
		return fmt.Errorf("%s: %s gave it the purl %s, not one of %s (is go on PATH?)", b, o.Generator, purl, b.Platform)
	}
	return nil
}

// readBounded reads path, failing past limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// limitedBuffer keeps the first bytes written to it and drops the rest.
type limitedBuffer struct {
	buf  *bytes.Buffer
	left int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	n := min(len(p), l.left)
	l.buf.Write(p[:n])
	l.left -= n
	return len(p), nil
}
