package main

import "fmt"

// bundleSpec is what Hauler's manifest and Zarf's package name.
type bundleSpec struct {
	Image        string // repo@sha256:<hex>
	Chart        string // the chart package's file name, in the dist dir
	ChartVersion string
	Version      string // the release's version (file names)
	Source       string // the project's URL
	Verify       string // what to verify the release by, for the comments
}

// haulerManifest is a Hauler manifest (content.hauler.cattle.io/v1) of
// the release: Images naming the image by digest, Charts the chart package
// in the dist dir (Hauler adds a chart by repoURL/name, a local path when
// repoURL is none).
func haulerManifest(s bundleSpec) []byte {
	return fmt.Appendf(nil, `# holdfast %[3]s for Hauler. In the dist dir, on the connected side:
#   hauler store sync -f hauler-manifest.yaml
#   hauler store save --filename holdfast-%[3]s.tar.zst
# sync fetches the image by digest from its registry and adds the chart from %[2]s beside this file;
# the haul carries both across. Verify the release first (%[5]s).
apiVersion: content.hauler.cattle.io/v1
kind: Images
metadata:
  name: holdfast-images
spec:
  images:
    - name: %[1]s
---
apiVersion: content.hauler.cattle.io/v1
kind: Charts
metadata:
  name: holdfast-charts
spec:
  charts:
    - name: %[2]s
      repoURL: .
      version: %[4]s
`, s.Image, s.Chart, s.Version, s.ChartVersion, s.Verify)
}

// zarfPackage is a Zarf package definition (zarf.yaml, ZarfPackageConfig)
// of the release: one required component with the chart package and the
// image by digest.
func zarfPackage(s bundleSpec) []byte {
	return fmt.Appendf(nil, `# holdfast %[3]s as a Zarf package. In the dist dir, on the connected side:
#   zarf package create .
# writes zarf-package-holdfast-<arch>-%[3]s.tar.zst with the chart from %[2]s and the image by digest;
# zarf package deploy installs it in the air gap. Verify the release first (%[6]s).
kind: ZarfPackageConfig
metadata:
  name: holdfast
  description: holdfast on every node - imports, pins and leases the node's air-gap images
  version: %[3]s
  source: %[5]s
components:
  - name: holdfast
    required: true
    charts:
      - name: holdfast
        version: %[4]s
        localPath: %[2]s
        namespace: holdfast-system
    images:
      - %[1]s
`, s.Image, s.Chart, s.Version, s.ChartVersion, s.Source, s.Verify)
}
