package registries

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/files"
)

// Settings are what a node is told of its registries: K3s's
// registries.yaml, the node's peer mirror and the registry config (a
// hosts.toml dir, containerd's certs.d layout) they are written into.
type Settings struct {
	YAML           string   // registries.yaml (--registries-yaml); "" for none
	PeerMirror     string   // the peer mirror (--peer-mirror); "" for none
	PeerRegistries []string // the registries the peer mirror serves (--peer-registries)
	Dir            string   // the registry config (--registry-config)
	// InsecurePerms reads a registries.yaml, and writes into a registry
	// config, that users other than root and holdfast's own may change.
	InsecurePerms bool
}

// Hosts is what Settings make of the registry config: the hosts.toml files
// Write puts there, and the credentials pulls use.
type Hosts struct {
	Credentials map[string]Credential // by host
	// Off says, when registries.yaml does not exist, that pulls go without
	// it (as K3s reads it: no file, no mirrors).
	Off string
	// Warnings are what the files cannot carry over (rewrites).
	Warnings []string
	// PeerMirror is the peer mirror as scheme://host:port (an IPv6 host
	// in brackets), as the node's peers reach it; "" without one.
	PeerMirror string

	source   string            // where the files come from, as messages name it
	files    map[string]string // hosts.toml content by registry dir
	set      bool              // false when neither file nor mirror is given: the dir is left alone
	dir      string
	insecure bool
}

// SettingError is a setting that cannot be used: a bad peer mirror or peer
// registry, or a registries.yaml that users other than root and holdfast's
// own may change. The caller's to report as bad usage.
type SettingError struct{ Err error }

func (e *SettingError) Error() string { return e.Err.Error() }

func (e *SettingError) Unwrap() error { return e.Err }

// Hosts reads registries.yaml and applies the peer mirror, with no side
// effect on the registry config: what they make of it is written by Write
// (once containerd answers). A registries.yaml that others may change is
// judged as a pull list is, and the file judged is the one read.
func (s Settings) Hosts() (Hosts, error) {
	h := Hosts{dir: s.Dir, insecure: s.InsecurePerms}
	if s.YAML == "" && s.PeerMirror == "" {
		return h, nil
	}
	if s.PeerMirror != "" {
		if err := CheckPeerRegistries(s.PeerRegistries); err != nil {
			return h, &SettingError{fmt.Errorf("--peer-registries: %w", err)}
		}
	}
	var f File
	from := "--peer-mirror " + s.PeerMirror
	if s.YAML != "" {
		from = s.YAML
		if s.PeerMirror != "" {
			from += " and --peer-mirror " + s.PeerMirror
		}
		loaded, off, err := s.load()
		if err != nil {
			return h, err
		}
		f, h.Off = loaded, off
	}
	if s.PeerMirror != "" {
		var err error
		if f, err = f.WithPeerMirror(s.PeerMirror, s.PeerRegistries); err != nil {
			return h, &SettingError{fmt.Errorf("--peer-mirror: %w", err)}
		}
		h.PeerMirror, _ = peerEndpoint(s.PeerMirror) // WithPeerMirror took it
	}
	files, warnings, err := f.HostsFiles(from)
	if err != nil {
		return h, err
	}
	h.Warnings = warnings
	if h.Credentials, err = f.Credentials(); err != nil {
		return h, fmt.Errorf("%s: %w", s.YAML, err)
	}
	h.source, h.files, h.set = from, files, true
	return h, nil
}

// load reads registries.yaml; one that does not exist is no file, and off
// says so.
func (s Settings) load() (f File, off string, err error) {
	path := s.YAML
	if !s.InsecurePerms {
		// Whoever may change it decides the node's mirrors and
		// credentials: judged as a pull list is, and the file judged is
		// the one read.
		real, err := files.CheckResolved("registries.yaml", path, os.Geteuid())
		if err != nil {
			return File{}, "", &SettingError{err}
		}
		if real != "" {
			path = real
		}
	}
	loaded, err := Load(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// As K3s reads it: no file, no mirrors. What an earlier file had
		// written into the registry config goes with it.
		return File{}, fmt.Sprintf("registries.yaml %s does not exist: pulls use no mirrors, TLS settings or credentials from it", s.YAML), nil
	case err != nil:
		return File{}, "", err
	}
	// Its own mistakes name it alone.
	if _, _, err := loaded.HostsFiles(s.YAML); err != nil {
		return File{}, "", err
	}
	return loaded, "", nil
}

// Write writes h into the registry config, refusing (a RefusedError) a dir
// that users other than root and holdfast's own may write, unless
// InsecurePerms, and a registry dir that is a symlink; nothing is written
// then. It returns, for each registry whose hosts.toml the operator wrote
// (kept as it is), why it goes without what h has for it. Hosts that
// neither file nor mirror made leave the dir alone.
func (h Hosts) Write() ([]string, error) {
	if !h.set {
		return nil, nil
	}
	var opts WriteOptions
	if !h.insecure {
		uid := os.Geteuid()
		opts.Check = func(dir string) error { return files.CheckPerms("registry config", dir, uid) }
	}
	res, err := Write(h.dir, h.files, opts)
	if err != nil {
		return nil, fmt.Errorf("applying %s to %s: %w", h.source, h.dir, err)
	}
	var skipped []string
	for _, reg := range res.Skipped {
		skipped = append(skipped, fmt.Sprintf("registry %s: %s was not written by holdfast and is kept as it is: pulls from %s follow it, without what %s has for it",
			reg, filepath.Join(h.dir, reg, hostsName), reg, h.source))
	}
	return skipped, nil
}
