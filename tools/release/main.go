// Command release writes holdfast's release into a dist directory: the
// image archive with its SBOM and signatures as OCI referrers of the image,
// the chart packaged with the image pinned by digest, the files Hauler and
// Zarf carry it with, SHA256SUMS, and the sigstore bundles of the chart and
// of SHA256SUMS. `make release` runs it after `make image` and the SBOMs; it
// is not part of holdfast.
//
//	release -dist dist -version v1.2.0 -image bin/holdfast-image.tar -sbom dist/sbom \
//	    -chart deploy/helm/holdfast -helm bin/helm -cosign bin/cosign3 -key release.key
//
// The key is a cosign private key: -key FILE, or the PEM itself in
// $HOLDFAST_RELEASE_KEY; its password in $COSIGN_PASSWORD (may be empty).
// Without a key it refuses, unless -unsigned: then every file that would be
// signed carries -unsigned in its name, and nothing is signed.
//
// The same image, SBOMs, chart, version and key give the same files but
// for the signatures: ECDSA signatures are randomized, and cosign times
// each signature referrer (org.opencontainers.image.created). So the image
// archive differs in index.json and in the signature referrers' manifests
// and bundles (its image, SBOM and their other blobs are the same bytes),
// the chart's and SHA256SUMS's .sigstore.json bundles differ, and
// SHA256SUMS in the lines of the image archive and the chart's bundle.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// keyEnv holds the release key's PEM when no -key file is given.
const keyEnv = "HOLDFAST_RELEASE_KEY"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o     options
		epoch = fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the release's time in `SECONDS` since 1970 (the commit's); default $SOURCE_DATE_EPOCH")
	)
	fs.StringVar(&o.Dist, "dist", "dist", "the `DIR` to write the release into")
	fs.StringVar(&o.Version, "version", "", "the release's `VERSION` (v1.2.0, or a commit); files are named without the leading v")
	fs.StringVar(&o.Image, "image", "bin/holdfast-image.tar", "the image archive `FILE` make image wrote")
	fs.StringVar(&o.SBOMDir, "sbom", "", "the `DIR` of the SBOMs (default DIST/sbom); its holdfast-image.cdx.json is the image's")
	fs.StringVar(&o.Chart, "chart", "deploy/helm/holdfast", "the chart's `DIR`")
	fs.StringVar(&o.Helm, "helm", "bin/helm", "the helm `COMMAND`")
	fs.StringVar(&o.Cosign, "cosign", "bin/cosign3", "the cosign v3 `COMMAND`")
	fs.StringVar(&o.Key, "key", "", "the cosign private key `FILE` to sign with (default: the PEM in $"+keyEnv+")")
	fs.BoolVar(&o.Unsigned, "unsigned", false, "write the release unsigned, -unsigned in the name of every file that would be signed")
	fs.StringVar(&o.Source, "source", "https://github.com/holdfast-project/holdfast", "the project's `URL`, for zarf.yaml")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "release: unexpected arguments %q\n", fs.Args())
		return 2
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || secs < 0 {
		fmt.Fprintf(stderr, "release: -epoch (or SOURCE_DATE_EPOCH) %q is not a number of seconds\n", *epoch)
		return 2
	}
	o.Created = time.Unix(secs, 0).UTC()
	if o.SBOMDir == "" {
		o.SBOMDir = o.Dist + "/sbom"
	}
	if err := o.check(os.Getenv(keyEnv)); err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 2
	}
	written, err := release(o)
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 1
	}
	for _, f := range written {
		fmt.Fprintln(stdout, f)
	}
	return 0
}

// options are everything a release is made from.
type options struct {
	Dist, Version, Image, SBOMDir, Chart string
	Helm, Cosign                         string
	Key                                  string // a file; "" with a key in keyEnv
	keyRef                               string // what cosign is given as --key
	Unsigned                             bool
	Source                               string
	Created                              time.Time
}

// errNoKey is the refusal to release without a key.
var errNoKey = errors.New("no release key: set RELEASE_KEY=FILE (a cosign private key) or " + keyEnv +
	" (the key's PEM), or UNSIGNED=1 for a release named -unsigned")

// check checks the options and chooses the key: the -key file, else the PEM
// in the environment (envKey, given to cosign as env://, never written
// down), else none, which only -unsigned allows.
func (o *options) check(envKey string) error {
	switch {
	case o.Version == "":
		return errors.New("-version is required")
	case o.Dist == "":
		return errors.New("-dist is required")
	}
	if _, err := fileVersion(o.Version); err != nil {
		return err
	}
	switch {
	case o.Key != "" && o.Unsigned, envKey != "" && o.Unsigned:
		return errors.New("a release key is given and -unsigned (UNSIGNED=1) too: give one of them")
	case o.Key != "":
		info, err := os.Stat(o.Key)
		if err != nil {
			return fmt.Errorf("release key: %w", err)
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("release key %s is not a regular file", o.Key)
		}
		o.keyRef = o.Key
	case envKey != "":
		o.keyRef = "env://" + keyEnv
	case !o.Unsigned:
		return errNoKey
	}
	return nil
}
