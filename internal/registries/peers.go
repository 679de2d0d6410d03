package registries

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// DefaultPeerRegistries are the registries a peer mirror serves unless told
// otherwise: the public ones images come from. Not "*" (containerd's
// _default): that would send every private registry's pulls to the mirror
// first, and containerd reads _default only for a registry without a
// hosts.toml of its own, so one the operator configured would go without it.
var DefaultPeerRegistries = []string{"docker.io", "ghcr.io", "quay.io", "registry.k8s.io", "mcr.microsoft.com",
	"public.ecr.aws", "gcr.io", "registry.gitlab.com"}

// WithPeerMirror is f with the node's peer mirror (its spegel, an http or
// https URL without a path) first among the endpoints of each of the
// registries ("*" or "_default" for every one without a hosts.toml of its
// own): a pull asks the peers before the mirrors
// registries.yaml names and before the registry itself. f is not changed.
func (f File) WithPeerMirror(mirror string, regs []string) (File, error) {
	u, err := url.Parse(mirror)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return File{}, fmt.Errorf("peer mirror %q: want http://host:port or https://host:port", mirror)
	}
	out := File{Mirrors: map[string]Mirror{}, Configs: f.Configs}
	for r, m := range f.Mirrors {
		out.Mirrors[r] = m
	}
	endpoint := u.Scheme + "://" + u.Host
	for _, r := range regs {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if r == "_default" {
			r = "*"
		}
		if r != "*" && !validHost(r) {
			return File{}, fmt.Errorf("peer registry %q is not a host name (host[:port]), * or _default", r)
		}
		m := out.Mirrors[r]
		m.Endpoints = append([]string{endpoint}, slices.DeleteFunc(slices.Clone(m.Endpoints), func(e string) bool {
			return strings.TrimSuffix(e, "/") == endpoint
		})...)
		out.Mirrors[r] = m
	}
	return out, nil
}
