package main

import (
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// imageBOM is the image's document, assembled from its binaries' documents:
// its component is the image (the index's digest is its version); its
// components are each binary of each platform (bom-ref OS/ARCH/NAME, with the
// file's SHA-256 and the build properties cyclonedx-gomod read) and each module
// a binary links, once per module, version and platform (bom-ref its purl,
// which names the platform); its dependencies say which binary links which.
func imageBOM(o *options, bins []*binary) *cdx.BOM {
	purl := imagePURL(o)
	image := cdx.Component{
		BOMRef:     purl,
		Type:       cdx.ComponentTypeContainer,
		Name:       o.Repo,
		Version:    o.ImageDigest,
		PackageURL: purl,
	}
	var components []cdx.Component
	modules := map[string]cdx.Component{}
	deps := map[string]map[string]bool{}
	var binRefs []string
	for _, b := range bins {
		ref := b.Platform.String() + "/" + b.Cmd
		binRefs = append(binRefs, ref)
		c := *b.BOM.Metadata.Component
		c.BOMRef = ref
		c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: b.SHA256}}
		c.Properties = b.BOM.Metadata.Properties
		components = append(components, c)
		// Every component of a binary's document is linked into it: the
		// build info lists only the modules linked, and std is the Go
		// release linked. So the binary depends on each (its document's
		// graph leaves std out); the modules keep the edges it has.
		deps[ref] = map[string]bool{}
		refs := map[string]string{}
		for _, m := range deref(b.BOM.Components) {
			old := m.BOMRef
			if m.PackageURL != "" {
				m.BOMRef = m.PackageURL
			}
			refs[old] = m.BOMRef
			deps[ref][m.BOMRef] = true
			if _, ok := modules[m.BOMRef]; !ok {
				modules[m.BOMRef] = m
			}
		}
		for _, d := range deref(b.BOM.Dependencies) {
			from := refs[d.Ref]
			if from == "" {
				continue
			}
			if deps[from] == nil {
				deps[from] = map[string]bool{}
			}
			for _, to := range deref(d.Dependencies) {
				if refs[to] != "" {
					deps[from][refs[to]] = true
				}
			}
		}
	}
	moduleRefs := slices.Sorted(maps.Keys(modules))
	for _, ref := range moduleRefs {
		components = append(components, modules[ref])
	}
	dependencies := []cdx.Dependency{{Ref: image.BOMRef, Dependencies: &binRefs}}
	for _, ref := range append(slices.Clone(binRefs), moduleRefs...) {
		d := cdx.Dependency{Ref: ref}
		if to := slices.Sorted(maps.Keys(deps[ref])); len(to) > 0 {
			d.Dependencies = &to
		}
		dependencies = append(dependencies, d)
	}

	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{Component: &image}
	if len(bins) > 0 {
		bom.Metadata.Tools = bins[0].BOM.Metadata.Tools
	}
	setTime(bom, o.Time)
	bom.Components = &components
	bom.Dependencies = &dependencies
	return bom
}

// imagePURL is the image's package URL: pkg:oci/NAME@DIGEST with the
// repository and the tag as qualifiers.
func imagePURL(o *options) string {
	name := strings.ToLower(path.Base(o.Repo))
	q := "repository_url=" + o.Repo + "&tag=" + url.QueryEscape(o.Tag)
	return "pkg:oci/" + name + "@" + strings.Replace(o.ImageDigest, ":", "%3A", 1) + "?" + q
}

func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}
