package containerd

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
)

// mirroredHeader asks a peer mirror (spegel) to serve what it holds itself
// and never to forward the request to another peer: a holder that lacks a
// blob says so at once, and the pull goes on to the next host.
const mirroredHeader = "X-Spegel-Mirrored"

// preferDial bounds the connection to a preferred holder: it is on the
// cluster's own network, and one that is gone must cost each blob seconds,
// not the 30 s of a registry's connection.
const preferDial = 5 * time.Second

// preferHost puts the peer mirror prefer first among the hosts of every
// registry next gives, for pulls by digest only (not to resolve a tag),
// with the header that keeps it to what it holds. A prefer that is not
// http(s)://host[:port] is ignored, and log hears why at debug level.
func preferHost(next docker.RegistryHosts, prefer string, log *slog.Logger) docker.RegistryHosts {
	if prefer == "" {
		return next
	}
	u, err := preferURL(prefer)
	if err != nil {
		log.Debug("ignoring the preferred peer mirror", "error", err)
		return next
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: preferDial, KeepAlive: 30 * time.Second}).DialContext
	transport.ResponseHeaderTimeout = responseTimeout
	first := docker.RegistryHost{
		Client:       &http.Client{Transport: transport},
		Host:         u.Host,
		Scheme:       u.Scheme,
		Path:         "/v2",
		Capabilities: docker.HostCapabilityPull,
		Header:       http.Header{mirroredHeader: []string{"true"}},
	}
	return func(host string) ([]docker.RegistryHost, error) {
		hosts, err := next(host)
		if err != nil {
			return nil, err
		}
		return append([]docker.RegistryHost{first}, hosts...), nil
	}
}

// preferURL parses a preferred peer mirror: http or https, a host and
// optionally a port from 1 to 65535, nothing else.
func preferURL(raw string) (*url.URL, error) {
	bad := func(why string) error {
		return fmt.Errorf("peer mirror %q: %s (want http://host:port or https://host:port)", raw, why)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, bad(err.Error())
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("not http or https")
	case u.Hostname() == "" || u.User != nil:
		return nil, bad("no host, or a user")
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, bad("a path, query or fragment")
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return nil, bad("port " + strconv.Quote(p) + " is not a number from 1 to 65535")
		}
	}
	return u, nil
}
