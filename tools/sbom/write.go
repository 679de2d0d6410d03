package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/uuid"
)

// ImageFile is the name of the image's document in the output dir.
const ImageFile = "holdfast-image.cdx.json"

// specVersion is the CycloneDX version every document is written in.
const specVersion = cdx.SpecVersion1_6

// write generates the document of every binary of every platform, then the
// image's, and writes them to o.Dir; it returns the files written. A binary
// that fails is named and the others are still checked, but then nothing is
// written: a release has the documents of all its binaries or none.
func write(o options) ([]string, error) {
	gomod, err := readGoMod(o.GoMod)
	if err != nil {
		return nil, fmt.Errorf("-gomod: %w", err)
	}
	if o.Generator, err = findGenerator(o.Generator, o.GoMod); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "holdfast-sbom-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var bins []*binary
	var errs []error
	for _, p := range o.Platforms {
		for _, c := range o.Cmds {
			b := &binary{Platform: p, Cmd: c, Path: filepath.Join(p.Dir, c)}
			err := b.inspect(&o, gomod)
			if err == nil {
				err = b.generate(&o, tmp)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			bins = append(bins, b)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, b := range bins {
		setTime(b.BOM, o.Time)
		f, err := writeBOM(filepath.Join(o.Dir, b.FileName()), b.BOM)
		if err != nil {
			return files, fmt.Errorf("%s: %w", b, err)
		}
		files = append(files, f)
	}
	f, err := writeBOM(filepath.Join(o.Dir, ImageFile), imageBOM(&o, bins))
	if err != nil {
		return files, err
	}
	return append(files, f), nil
}

// findGenerator is the -generator command, or by default cyclonedx-gomod in
// PATH, else in the bin/ beside the go.mod, where make deps-sbom links it.
func findGenerator(name, gomod string) (string, error) {
	if name != "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("-generator: %w", err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("cyclonedx-gomod"); err == nil {
		return p, nil
	}
	p := filepath.Join(filepath.Dir(gomod), "bin", "cyclonedx-gomod")
	if _, err := exec.LookPath(p); err != nil {
		return "", fmt.Errorf("cyclonedx-gomod is neither in PATH nor %s: make deps-sbom installs it there", p)
	}
	return p, nil
}

func setTime(bom *cdx.BOM, t time.Time) {
	if bom.Metadata == nil {
		bom.Metadata = &cdx.Metadata{}
	}
	bom.Metadata.Timestamp = ""
	if !t.IsZero() {
		bom.Metadata.Timestamp = t.Format(time.RFC3339)
	}
}

// encode writes bom as indented JSON whose serial number is a name-based UUID
// of the document without it: the same content, the same serial.
func encode(bom *cdx.BOM) ([]byte, error) {
	bom.SerialNumber = ""
	bare, err := encodeOnce(bom)
	if err != nil {
		return nil, err
	}
	bom.SerialNumber = uuid.NewSHA1(uuid.NameSpaceURL, bare).URN()
	return encodeOnce(bom)
}

func encodeOnce(bom *cdx.BOM) ([]byte, error) {
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true).SetEscapeHTML(false)
	if err := enc.EncodeVersion(bom, specVersion); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeBOM writes bom to path through a new file renamed over it, so that a
// link at path is replaced, never followed.
func writeBOM(path string, bom *cdx.BOM) (string, error) {
	data, err := encode(bom)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}
