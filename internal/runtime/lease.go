package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// StateMediaType is the media type of the blob that keeps a source's desired
// state (EncodeState), held by the source's lease and labelled LabelState.
const StateMediaType = "application/vnd.holdfast.source-state.v1+json"

// keptPrefix follows LeasePrefix in the ID of a kept source's lease, so that
// it never equals the lease of an images-dir source at the same path.
const keptPrefix = "kept-"

// keptMark leads the source of a kept source's lease and state: the path with
// it is no path under any images dir, so a holdfast older than kept sources
// judges the lease as another configuration's and leaves it alone rather
// than release it as an images-dir source whose file is gone.
const keptMark = "kept:"

// LeaseID names the lease of one source at one identity: readable, stable for
// the same path and content, and new when the archive is replaced.
func LeaseID(source, identity string) string {
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, filepath.Base(source))
	if len(base) > 48 {
		base = base[:48]
	}
	return fmt.Sprintf("%s%s-%s-%s", LeasePrefix, base, shortHash(source, 6), shortHash(identity, 4))
}

// KeptLeaseID names the lease of a kept source (holdfast import) of one path
// at one identity.
func KeptLeaseID(source, identity string) string {
	return LeasePrefix + keptPrefix + strings.TrimPrefix(LeaseID(source, identity), LeasePrefix)
}

func shortHash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:n])
}

// StoredSource is what a lease (LabelSource) and its state say of a
// source's path.
func StoredSource(path string, kept bool) string {
	if kept {
		return keptMark + path
	}
	return path
}

// SourcePath is the path of a stored source (kept sources stored before the
// mark have none).
func SourcePath(stored string, kept bool) string {
	if kept {
		return strings.TrimPrefix(stored, keptMark)
	}
	return stored
}

// TruncateLabel keeps a label value within containerd's 4 KiB label limit.
func TruncateLabel(v string) string {
	if len(v) > 3072 {
		return v[:3072]
	}
	return v
}

// EncodeState is the state blob of st: the source as stored (StoredSource),
// its identity and mtime, the names it wants and the blobs they need.
func EncodeState(st SourceState) ([]byte, error) {
	st.Source = StoredSource(st.Source, st.Kept)
	return json.Marshal(st)
}

// DecodeState reads a state blob of a lease; kept says the lease is a kept
// source's (its labels say so, not the blob). Complete is set: the blob is
// written last, so an import that wrote it finished.
func DecodeState(data []byte, kept bool) (SourceState, error) {
	var st SourceState
	if err := json.Unmarshal(data, &st); err != nil {
		return SourceState{}, err
	}
	st.Source = SourcePath(st.Source, kept)
	st.Kept, st.Complete = kept, true
	return st, nil
}
