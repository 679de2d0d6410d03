package registries

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
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
// An IPv6 address may stand without brackets when a port follows it
// (http://fd00::5:30020, what http://$(NODE_IP):30020 expands to on an
// IPv6 node); the hosts.toml names it in brackets.
func (f File) WithPeerMirror(mirror string, regs []string) (File, error) {
	endpoint, err := peerEndpoint(mirror)
	if err != nil {
		return File{}, err
	}
	if err := CheckPeerRegistries(regs); err != nil {
		return File{}, err
	}
	out := File{Mirrors: map[string]Mirror{}, Configs: f.Configs}
	for r, m := range f.Mirrors {
		out.Mirrors[r] = m
	}
	for _, r := range regs {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if r == "_default" {
			r = "*"
		}
		m := out.Mirrors[r]
		m.Endpoints = append([]string{endpoint}, slices.DeleteFunc(slices.Clone(m.Endpoints), func(e string) bool {
			return strings.TrimSuffix(e, "/") == endpoint
		})...)
		out.Mirrors[r] = m
	}
	return out, nil
}

// CheckPeerRegistries says which of regs (what --peer-registries lists,
// blanks ignored) is neither a registry host (host[:port]) nor * or
// _default, or nil.
func CheckPeerRegistries(regs []string) error {
	for _, r := range regs {
		r = strings.TrimSpace(r)
		if r == "" || r == "*" || r == "_default" {
			continue
		}
		if err := hostError(r); err != nil {
			return fmt.Errorf("registry %w; want host[:port], * or _default", err)
		}
	}
	return nil
}

// peerEndpoint is the peer mirror URL as scheme://host:port, an IPv6 host
// in brackets.
func peerEndpoint(mirror string) (string, error) {
	bad := fmt.Errorf("peer mirror %q: want http://host:port or https://host:port", mirror)
	raw := mirror
	if scheme, rest, ok := strings.Cut(mirror, "://"); ok && !strings.HasPrefix(rest, "[") {
		hostport, path, _ := strings.Cut(rest, "/")
		if i := strings.LastIndexByte(hostport, ':'); strings.Count(hostport, ":") > 1 && i > 0 {
			addr, err := netip.ParseAddr(hostport[:i])
			port, perr := strconv.ParseUint(hostport[i+1:], 10, 16)
			if err != nil || !addr.Is6() || addr.Zone() != "" || perr != nil || port == 0 {
				return "", fmt.Errorf("%w: %q is neither host:port nor an IPv6 address and a port", bad, hostport)
			}
			raw = scheme + "://" + netip.AddrPortFrom(addr, uint16(port)).String() + "/" + path
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return "", bad
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return "", fmt.Errorf("%w: port %q is not a number from 1 to 65535", bad, p)
		}
	}
	return u.Scheme + "://" + u.Host, nil
}
