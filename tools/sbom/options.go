package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"golang.org/x/mod/semver"
)

// options are the command's flags, checked.
type options struct {
	Dir         string
	Repo, Tag   string // from -image-name
	ImageDigest string
	GoMod       string
	Generator   string
	Platforms   []platform
	Cmds        []string
	Versions    map[string]string // -version CMD=VERSION
	Time        time.Time         // zero: the documents name no time
}

// platform is one platform of the image and the dir holding its binaries.
type platform struct {
	OS, Arch string
	Dir      string
}

func (p platform) String() string { return p.OS + "/" + p.Arch }

func parsePlatform(s string) (platform, error) {
	spec, dir, ok := strings.Cut(s, "=")
	os, arch, ok2 := strings.Cut(spec, "/")
	if !ok || !ok2 || dir == "" || os == "" || arch == "" || strings.Contains(arch, "/") {
		return platform{}, fmt.Errorf("platform %q is not OS/ARCH=DIR", s)
	}
	return platform{OS: os, Arch: arch, Dir: dir}, nil
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// setImage reads -image-name and -epoch.
func (o *options) setImage(name, epoch string) error {
	if name == "" {
		return errors.New("-image-name REPOSITORY:TAG is required")
	}
	ref, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return fmt.Errorf("-image-name %q: %w", name, err)
	}
	tagged, ok := ref.(reference.NamedTagged)
	if _, digested := ref.(reference.Digested); !ok || digested {
		return fmt.Errorf("-image-name %q is not REPOSITORY:TAG", name)
	}
	o.Repo, o.Tag = ref.Name(), tagged.Tag()
	if epoch != "" {
		secs, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil || secs < 0 {
			return fmt.Errorf("-epoch (or SOURCE_DATE_EPOCH) %q is not a number of seconds", epoch)
		}
		o.Time = time.Unix(secs, 0).UTC()
	}
	return nil
}

func (o *options) check() error {
	switch {
	case o.Dir == "":
		return errors.New("-o DIR is required")
	case !digestRE.MatchString(o.ImageDigest):
		return fmt.Errorf("-image-digest %q is not sha256:<64 lowercase hex digits>", o.ImageDigest)
	case o.GoMod == "":
		return errors.New("-gomod FILE is required")
	case len(o.Platforms) == 0:
		return errors.New("no -bin OS/ARCH=DIR")
	case len(o.Cmds) == 0:
		return errors.New("no -cmd NAME")
	}
	for i, p := range o.Platforms {
		if slices.ContainsFunc(o.Platforms[:i], func(q platform) bool { return q.String() == p.String() }) {
			return fmt.Errorf("platform %s given twice", p)
		}
	}
	for i, c := range o.Cmds {
		if slices.Contains(o.Cmds[:i], c) {
			return fmt.Errorf("-cmd %s given twice", c)
		}
	}
	for c := range o.Versions {
		if !slices.Contains(o.Cmds, c) {
			return fmt.Errorf("-version %s=…: %s is no -cmd", c, c)
		}
	}
	return nil
}

// moduleVersion is the version the binaries of the go.mod's module are named
// with: the image's tag, as a Go module version (v1.2.3) when it is a
// semantic version with or without its v, else the tag as it is.
func (o *options) moduleVersion() string {
	if v := "v" + strings.TrimPrefix(o.Tag, "v"); semver.IsValid(v) {
		return v
	}
	return o.Tag
}
