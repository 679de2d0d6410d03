package datadir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Layout is where each thing holdfast keeps lies in a data dir: every fixed
// name joined onto the data dir's path is joined here.
type Layout struct {
	// Dir is the data dir itself.
	Dir string
}

// At is the layout of the data dir at dir.
func At(dir string) Layout { return Layout{Dir: dir} }

// Images is the images dir read when none is given (--images).
func (l Layout) Images() string { return filepath.Join(l.Dir, "images") }

// Pins holds the node's own pin list, LocalPins.
func (l Layout) Pins() string { return filepath.Join(l.Dir, "pins") }

// LocalPins is the pin list that holdfast pin and unpin edit.
func (l Layout) LocalPins() string { return filepath.Join(l.Pins(), "local.pins") }

// Peers holds the peer source, PeerList.
func (l Layout) Peers() string { return filepath.Join(l.Dir, "peers") }

// PeerList is the peer source: the pull list of what the node's workloads
// need, which holdfast run --pull-required writes.
func (l Layout) PeerList() string { return filepath.Join(l.Peers(), "required.txt") }

// SetLists holds a pull list per ImageSet the agent keeps on the node
// (SetList); it lies under Peers, which passes read.
func (l Layout) SetLists() string { return filepath.Join(l.Peers(), "sets") }

// SetList is the pull list of the ImageSet name: what the agent pulls,
// pins and leases of it, which holdfast run writes. name must be a DNS
// subdomain name (the agent checks it), so that the file lies in SetLists.
func (l Layout) SetList(name string) string { return filepath.Join(l.SetLists(), name+".txt") }

// OwnDirs are the images dirs in the data dir that holdfast writes itself:
// Pins and Peers.
func (l Layout) OwnDirs() []string { return []string{l.Pins(), l.Peers()} }

// StateCache holds copies of the leases' state blobs, named by digest.
func (l Layout) StateCache() string { return filepath.Join(l.Dir, "state") }

// Token is the file of the agent's own reporter's token unless run is given
// another (--token-file).
func (l Layout) Token() string { return filepath.Join(l.Dir, "token") }

// RegistryConfig is the registry config (hosts.toml dirs) unless another is
// given (--registry-config).
func (l Layout) RegistryConfig() string { return filepath.Join(l.Dir, "registry.d") }

// Containerd holds the embedded containerd's config, root, state and sockets.
func (l Layout) Containerd() string { return filepath.Join(l.Dir, "containerd") }

// IngestOwner holds the owner ID of the data dir's ingests in containerd.
func (l Layout) IngestOwner() string { return filepath.Join(l.Dir, "ingest-owner") }

// lockFile is the file that the data dir's Lock locks besides the dir.
func (l Layout) lockFile() string { return filepath.Join(l.Dir, "lock") }

// ownerFile records who holds the data dir's Lock.
func (l Layout) ownerFile() string { return filepath.Join(l.Dir, "owner.json") }

// ImageDirs are the images dirs a pass reads: those given, made absolute,
// or Images (made when missing) when none is; then OwnDirs, made when
// missing.
func (l Layout) ImageDirs(given []string) ([]string, error) {
	var dirs []string
	for _, d := range given {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, abs)
	}
	if len(dirs) == 0 {
		dir := l.Images()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating images dir: %w", err)
		}
		dirs = []string{dir}
	}
	for _, own := range l.OwnDirs() {
		if err := os.MkdirAll(own, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", own, err)
		}
		dirs = append(dirs, own)
	}
	return dirs, nil
}
