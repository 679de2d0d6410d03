// Command sbom writes the software bills of materials of a release: one
// CycloneDX JSON document per binary of holdfast's image, made by
// cyclonedx-gomod from the build info the Go linker wrote into the binary
// (the modules actually linked), and one for the image, whose components are
// those binaries per platform and the modules each links. The same binaries
// and flags give the same bytes: no random serial number, and the time is the
// epoch given. `make release` runs it; it is not part of holdfast.
//
//	sbom -o dist/sbom -image-name ghcr.io/holdfast-project/holdfast:v1.2.0 -image-digest sha256:… \
//	    -gomod go.mod -epoch $(git log -1 --format=%ct) \
//	    -bin linux/amd64=bin/linux_amd64 -bin linux/arm64=bin/linux_arm64 \
//	    -cmd holdfast -cmd holdfast-reporter -cmd spegel -version spegel=v0.7.2-k3s1
//
// It writes DIR/<cmd>_<os>_<arch>.cdx.json per binary and
// DIR/holdfast-image.cdx.json.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, code := parseFlags(args, stderr)
	if code != 0 {
		return code
	}
	files, err := write(o)
	if err != nil {
		fmt.Fprintf(stderr, "sbom: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, int) {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{Versions: map[string]string{}}
	var imageName, epoch string
	fs.StringVar(&o.Dir, "o", "", "output `DIR` (created if missing)")
	fs.StringVar(&imageName, "image-name", "", "the image's `REPOSITORY:TAG` (the tag is the version of holdfast's binaries)")
	fs.StringVar(&o.ImageDigest, "image-digest", "", "the digest of the image's index, `sha256:HEX`")
	fs.StringVar(&o.GoMod, "gomod", "go.mod", "the go.mod the binaries of its module were built from: each module they link must be the one it requires")
	fs.StringVar(&o.Generator, "generator", "", "the cyclonedx-gomod `COMMAND` (a path, or a name looked up in PATH); default cyclonedx-gomod in PATH, else bin/cyclonedx-gomod beside the -gomod file (make deps-sbom)")
	fs.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the documents' time in `SECONDS` since 1970 (the commit's); default $SOURCE_DATE_EPOCH; none: no time")
	fs.Func("bin", "`OS/ARCH=DIR`: a platform and the dir holding its binaries (repeatable)", func(s string) error {
		p, err := parsePlatform(s)
		if err == nil {
			o.Platforms = append(o.Platforms, p)
		}
		return err
	})
	fs.Func("cmd", "`NAME` of a binary in each platform's dir (repeatable)", func(s string) error {
		if s == "" || strings.ContainsAny(s, `/\`) || s == "." || s == ".." {
			return fmt.Errorf("%q is not a file name", s)
		}
		o.Cmds = append(o.Cmds, s)
		return nil
	})
	fs.Func("version", "`CMD=VERSION` of a binary of another module whose build info names no version (repeatable)", func(s string) error {
		cmd, v, ok := strings.Cut(s, "=")
		if !ok || cmd == "" || v == "" {
			return fmt.Errorf("%q is not CMD=VERSION", s)
		}
		o.Versions[cmd] = v
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sbom: unexpected arguments %q\n", fs.Args())
		return o, 2
	}
	err := o.setImage(imageName, epoch)
	if err == nil {
		err = o.check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "sbom: %v\n", err)
		return o, 2
	}
	return o, 0
}
