package containerd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes/docker"
)

// nodeHosts stands for what a node's hosts.toml gives a registry: its own
// peer mirror, then the registry.
func nodeHosts(host string) ([]docker.RegistryHost, error) {
	if host == "broken.example" {
		return nil, errors.New("no hosts")
	}
	all := docker.HostCapabilityPull | docker.HostCapabilityResolve
	return []docker.RegistryHost{
		{Host: "10.0.0.1:30020", Scheme: "http", Path: "/v2", Capabilities: all},
		{Host: host, Scheme: "https", Path: "/v2", Capabilities: all | docker.HostCapabilityPush},
	}, nil
}

// TestPreferHost: a preferred peer mirror comes first among a registry's
// hosts, to pull by digest only (never to resolve a tag), asking for what
// it holds itself; the node's hosts follow as they were. A URL that is no
// http(s)://host[:port] leaves the hosts as they are, with a debug line.
func TestPreferHost(t *testing.T) {
	for _, prefer := range []string{"http://10.0.0.7:30020", "https://[fd00::7]:30020", "http://holder.example/"} {
		hosts, err := preferHost(nodeHosts, prefer, slog.New(slog.DiscardHandler))("ghcr.io")
		if err != nil {
			t.Fatal(err)
		}
		if len(hosts) != 3 {
			t.Fatalf("%s: %d hosts, want the preferred one and the node's two", prefer, len(hosts))
		}
		h := hosts[0]
		if got := h.Scheme + "://" + h.Host; got != strings.TrimSuffix(prefer, "/") || h.Path != "/v2" {
			t.Errorf("%s: first host %s path %q", prefer, got, h.Path)
		}
		if h.Capabilities != docker.HostCapabilityPull {
			t.Errorf("%s: capabilities %b, want pull only (a tag resolves through the node's hosts)", prefer, h.Capabilities)
		}
		if h.Header.Get("X-Spegel-Mirrored") != "true" {
			t.Errorf("%s: header %v, want X-Spegel-Mirrored: true", prefer, h.Header)
		}
		if h.Client == nil || h.Client.Transport == nil {
			t.Errorf("%s: no client of its own (bounded waits)", prefer)
		}
		if hosts[1].Host != "10.0.0.1:30020" || hosts[2].Host != "ghcr.io" || hosts[2].Capabilities&docker.HostCapabilityResolve == 0 {
			t.Errorf("%s: the node's hosts changed: %+v", prefer, hosts[1:])
		}
	}
	if _, err := preferHost(nodeHosts, "http://10.0.0.7:30020", slog.New(slog.DiscardHandler))("broken.example"); err == nil {
		t.Error("the node's hosts failed, and the preferred one hid it")
	}
	for _, bad := range []string{"ftp://10.0.0.7:30020", "10.0.0.7:30020", "http://", "http://10.0.0.7:30020/v2",
		"http://10.0.0.7:0", "http://10.0.0.7:99999", "http://u:p@10.0.0.7:30020", "http://10.0.0.7:30020?x=1", "http://10.0.0.7:"} {
		var log bytes.Buffer
		hosts, err := preferHost(nodeHosts, bad, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))("ghcr.io")
		if err != nil || len(hosts) != 2 || hosts[0].Host != "10.0.0.1:30020" {
			t.Errorf("%q: hosts %+v (%v), want the node's as they are", bad, hosts, err)
		}
		if !strings.Contains(log.String(), "level=DEBUG") || !strings.Contains(log.String(), "peer mirror") {
			t.Errorf("%q: no debug line naming it: %q", bad, log.String())
		}
	}
	if hosts, _ := preferHost(nodeHosts, "", slog.New(slog.DiscardHandler))("ghcr.io"); len(hosts) != 2 {
		t.Errorf("no preferred mirror: %d hosts, want the node's two", len(hosts))
	}
}
