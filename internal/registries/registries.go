// Package registries turns K3s's registries.yaml into containerd hosts.toml
// files, so that pull lists follow the same mirrors as the node's K3s, with
// the node's peer mirror first where it is given (Settings: what a node is
// told, applied to its registry config).
//
// What carries over: mirrors' endpoints (tried in order, the registry itself
// last), TLS settings (ca_file, cert_file/key_file, insecure_skip_verify) and
// credentials (username/password or auth) per host. What does not: rewrites
// (hosts.toml has no equivalent); a registry that uses them gets a warning.
package registries

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/lineerr"
	"github.com/holdfast-project/holdfast/internal/units"
)

// Marker starts every file this package writes; a hosts.toml without it is
// the operator's and is never overwritten or removed.
const Marker = "# Written by holdfast from "

// File is K3s's registries.yaml.
type File struct {
	Mirrors map[string]Mirror `json:"mirrors" yaml:"mirrors"`
	Configs map[string]Config `json:"configs" yaml:"configs"`
}

// Mirror lists the endpoints of one registry.
type Mirror struct {
	Endpoints []string          `json:"endpoint" yaml:"endpoint"`
	Rewrite   map[string]string `json:"rewrite" yaml:"rewrite"`
}

// Config is the TLS and auth of one host.
type Config struct {
	Auth *Auth `json:"auth" yaml:"auth"`
	TLS  *TLS  `json:"tls" yaml:"tls"`
}

// Auth is a host's credentials.
type Auth struct {
	Username string `json:"username" yaml:"username"`
	Password string `json:"password" yaml:"password"`
	Auth     string `json:"auth" yaml:"auth"` // base64 of username:password
}

// TLS is a host's TLS settings.
type TLS struct {
	CAFile             string `json:"ca_file" yaml:"ca_file"`
	CertFile           string `json:"cert_file" yaml:"cert_file"`
	KeyFile            string `json:"key_file" yaml:"key_file"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify" yaml:"insecure_skip_verify"`
}

// Credential is a username and password for a host.
type Credential struct{ Username, Password string }

// MaxFileBytes bounds a registries.yaml (docs/security.md): a larger file
// is refused before it is parsed.
const MaxFileBytes = 4 << 20

// Load reads and parses a registries.yaml of at most MaxFileBytes: a
// regular file only, opened as every operator's file is (files.Open: a
// named pipe or a device is refused, never waited on).
func Load(path string) (File, error) {
	data, err := files.ReadFile(path, MaxFileBytes)
	if errors.Is(err, files.ErrTooLarge) {
		return File{}, fmt.Errorf("reading %s: larger than %s, more than a registries.yaml may have", path, units.Whole(MaxFileBytes))
	}
	if err != nil {
		return File{}, fmt.Errorf("reading %s: %w", path, lineerr.Cause(err))
	}
	return Parse(path, data)
}

// Parse parses the bytes of a registries.yaml read from path, as K3s reads
// it (keys as written, YAML 1.1's yes and no for booleans), but refusing
// a key it does not know rather than ignoring it: a misspelt key would
// leave a registry without the mirror or the credentials meant for it.
// Only the first YAML document is read.
func Parse(path string, data []byte) (File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return File{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	return f, nil
}

// HostsFiles returns the hosts.toml content for each registry, by directory
// name (a registry host, or _default for K3s's "*"), and warnings.
func (f File) HostsFiles(source string) (map[string]string, []string, error) {
	out := map[string]string{}
	var warnings []string
	names := map[string]bool{}
	for r := range f.Mirrors {
		names[r] = true
	}
	for r := range f.Configs {
		if !strings.Contains(r, "://") {
			names[r] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for r := range names {
		sorted = append(sorted, r)
	}
	sort.Strings(sorted)
	for _, reg := range sorted {
		m := f.Mirrors[reg]
		if len(m.Rewrite) > 0 {
			warnings = append(warnings, fmt.Sprintf("%s: registry %s has rewrites, which hosts.toml cannot express; holdfast pulls it without them", source, reg))
		}
		dir := reg
		if reg != "*" {
			if err := hostError(reg); err != nil {
				return nil, nil, fmt.Errorf("%s: registry %w", source, err)
			}
		}
		var b strings.Builder
		b.WriteString(Marker + source + "; changes here are overwritten.\n")
		if reg == "*" {
			dir = "_default"
		} else {
			fmt.Fprintf(&b, "server = %s\n", strconv.Quote(serverURL(reg)))
			if c, ok := f.Configs[reg]; ok && c.TLS != nil {
				writeTLS(&b, c.TLS)
			}
		}
		for _, ep := range m.Endpoints {
			u, err := endpointURL(ep)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: mirror %s: %w", source, reg, err)
			}
			fmt.Fprintf(&b, "\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n", strconv.Quote(u.String()))
			if c, ok := f.config(u.Host); ok && c.TLS != nil {
				writeTLS(&b, c.TLS)
			}
		}
		out[dir] = b.String()
	}
	return out, warnings, nil
}

// hostError says why reg is not a registry host as a reference names it
// (host, host:port, [v6]:port, the port from 1 to 65535), or nil: never a
// path, so that its hosts.toml dir is one element under the hosts dir.
func hostError(reg string) error {
	bad := fmt.Errorf("%q is not a host name (host[:port])", reg)
	if reg == "" || reg == "." || reg == ".." || strings.ContainsAny(reg, "/\\ \t\r\n\x00") {
		return bad
	}
	u, err := url.Parse("https://" + reg)
	if err != nil || u.Host != reg || u.Path != "" || u.User != nil {
		return bad
	}
	if strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("%q has no port after its colon", reg)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("%q: port %s is not a number from 1 to 65535", reg, p)
		}
	}
	return nil
}

func writeTLS(b *strings.Builder, t *TLS) {
	if t.CAFile != "" {
		fmt.Fprintf(b, "  ca = %s\n", strconv.Quote(t.CAFile))
	}
	if t.CertFile != "" && t.KeyFile != "" {
		fmt.Fprintf(b, "  client = [[%s, %s]]\n", strconv.Quote(t.CertFile), strconv.Quote(t.KeyFile))
	}
	if t.InsecureSkipVerify {
		b.WriteString("  skip_verify = true\n")
	}
}

func serverURL(reg string) string {
	if reg == "docker.io" {
		return "https://registry-1.docker.io"
	}
	return "https://" + reg
}

func endpointURL(ep string) (*url.URL, error) {
	if !strings.Contains(ep, "://") {
		ep = "https://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not a URL", ep)
	}
	return u, nil
}

// config finds a host's config, keyed by the host or by a URL of it.
func (f File) config(host string) (Config, bool) {
	if c, ok := f.Configs[host]; ok {
		return c, true
	}
	for key, c := range f.Configs {
		if u, err := url.Parse(key); err == nil && strings.Contains(key, "://") && u.Host == host {
			return c, true
		}
	}
	return Config{}, false
}

// Credentials returns the credentials per host.
func (f File) Credentials() (map[string]Credential, error) {
	out := map[string]Credential{}
	for host, c := range f.Configs {
		if c.Auth == nil {
			continue
		}
		h := host
		if strings.Contains(host, "://") {
			u, err := url.Parse(host)
			if err != nil {
				return nil, fmt.Errorf("config %q: %w", host, err)
			}
			h = u.Host
		}
		cred := Credential{Username: c.Auth.Username, Password: c.Auth.Password}
		if c.Auth.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(c.Auth.Auth)
			if err != nil {
				return nil, fmt.Errorf("config %q: auth is not base64: %w", host, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("config %q: auth is not username:password", host)
			}
			cred = Credential{Username: user, Password: pass}
		}
		out[h] = cred
	}
	return out, nil
}
