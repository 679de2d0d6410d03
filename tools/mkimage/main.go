// Command mkimage writes holdfast's own container image as an OCI image
// layout tar: an index of one image per platform, each image one gzip layer
// holding the static binaries at the root. Everything in it comes from its
// inputs and the epoch given (the commit's time), so the same commit gives
// the same bytes and digest. `make image` runs it; it is not part of holdfast.
//
//	mkimage -o bin/holdfast-image.tar -repo ghcr.io/holdfast-project/holdfast -version v1.2.0 \
//	    -revision $(git rev-parse HEAD) -epoch $(git log -1 --format=%ct) \
//	    -bin holdfast -bin holdfast-reporter \
//	    -platform linux/amd64=bin/linux_amd64 -platform linux/arm64=bin/linux_arm64
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o       options
		epoch   = fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the image's time in `SECONDS` since 1970 (the commit's); default $SOURCE_DATE_EPOCH")
		nameOut = fs.String("name-out", "", "also write REPO:VERSION (one line) to `FILE`")
	)
	fs.StringVar(&o.Output, "o", "", "output `FILE`: an OCI image layout tar")
	fs.StringVar(&o.Repo, "repo", "", "image `REPOSITORY`, with its registry (ghcr.io/holdfast-project/holdfast)")
	fs.StringVar(&o.Version, "version", "", "image tag and org.opencontainers.image.version")
	fs.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision (the commit)")
	fs.StringVar(&o.Source, "source", "", "org.opencontainers.image.source (`URL` of the repository)")
	fs.StringVar(&o.Entrypoint, "entrypoint", "holdfast", "the -bin `NAME` that is the entrypoint")
	fs.Func("bin", "`NAME` of a binary to put at /NAME, read from each platform's dir (repeatable)", func(s string) error {
		if s == "" || strings.ContainsAny(s, "/") || s == "." || s == ".." {
			return fmt.Errorf("%q is not a file name", s)
		}
		o.Bins = append(o.Bins, s)
		return nil
	})
	fs.Func("platform", "`OS/ARCH=DIR`: a platform and the dir holding its binaries (repeatable)", func(s string) error {
		p, err := parsePlatform(s)
		if err == nil {
			o.Platforms = append(o.Platforms, p)
		}
		return err
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mkimage: unexpected arguments %q\n", fs.Args())
		return 2
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || secs < 0 {
		fmt.Fprintf(stderr, "mkimage: -epoch (or SOURCE_DATE_EPOCH) %q is not a number of seconds\n", *epoch)
		return 2
	}
	o.Created = time.Unix(secs, 0).UTC()
	if err := o.check(); err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 2
	}
	dgst, err := writeFile(o)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	if *nameOut != "" {
		if err := os.WriteFile(*nameOut, []byte(o.Name()+"\n"), 0o644); err != nil {
			fmt.Fprintf(stderr, "mkimage: writing %s: %v\n", *nameOut, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "name   %s\ndigest %s\nfile   %s\n", o.Name(), dgst, o.Output)
	return 0
}
