package registries

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// DefaultPeerRegistries are the registries a peer mirror serves unless told
// otherwise: "*", every registry (containerd's _default hosts.toml), as
// spegel mirrors every registry by default.
const DefaultPeerRegistries = "*"

// WithPeerMirror is f with the node's peer mirror (its spegel, an http or
// https URL without a path) first among the endpoints of each of the
// registries ("*" for every one): a pull asks the peers before the mirrors
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
		if r != "*" && !validHost(r) {
			return File{}, fmt.Errorf("peer registry %q is not a host name (host[:port]) or *", r)
		}
		m := out.Mirrors[r]
		m.Endpoints = append([]string{endpoint}, slices.DeleteFunc(slices.Clone(m.Endpoints), func(e string) bool {
			return strings.TrimSuffix(e, "/") == endpoint
		})...)
		out.Mirrors[r] = m
	}
	return out, nil
}
