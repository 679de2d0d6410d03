package source

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// OpenSource opens an archive source for reading. An ordinary file is opened
// as Open does. A split bundle reads as its parts joined in order, each
// opened (as Open does) when the one before it ends, the first at once;
// nothing is copied. A Zarf set is checked as it is read: at the end, the
// bytes read must have the size and sha256 its part000 gives, or that last
// Read fails, naming the bundle and what differs, and so does Close, as it
// does when the stream was not read to its end. An incomplete bundle is not
// opened: the error says why.
func OpenSource(src Source) (io.ReadCloser, error) {
	if len(src.Parts) == 0 {
		return Open(src.Path)
	}
	if src.Incomplete != "" {
		return nil, fmt.Errorf("%s: %s", src.Path, src.Incomplete)
	}
	j := &joined{name: filepath.Base(src.Path), parts: src.Parts}
	if strings.HasSuffix(src.Parts[0], ".part000") {
		meta, err := readZarfMeta(src.Parts[0])
		if err != nil {
			return nil, err
		}
		j.parts = src.Parts[1:]
		j.meta, j.metaName, j.sum = &meta, filepath.Base(src.Parts[0]), sha256.New()
	}
	if err := j.openNext(); err != nil {
		return nil, err
	}
	return j, nil
}

// joined reads parts one after the other.
type joined struct {
	mu    sync.Mutex
	name  string // the bundle's
	parts []string
	next  int      // the index of the part to open next
	cur   *os.File // the part being read; nil between parts and at the end
	err   error    // what ended the stream: io.EOF, or the error Read returned

	// A Zarf set only.
	meta     *zarfMeta
	metaName string
	sum      hash.Hash
	read     int64
	checked  bool  // read to its end and found as part000 says
	mismatch error // found otherwise
}

func (j *joined) openNext() error {
	f, err := Open(j.parts[j.next])
	if err != nil {
		return err
	}
	j.cur = f
	j.next++
	return nil
}

func (j *joined) Read(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.err == nil {
		if j.cur == nil {
			if j.next == len(j.parts) {
				j.err = j.end()
				break
			}
			if err := j.openNext(); err != nil {
				j.err = err
				break
			}
		}
		n, err := j.cur.Read(p)
		if n > 0 && j.meta != nil {
			j.sum.Write(p[:n])
			j.read += int64(n)
			if j.read > j.meta.Bytes {
				j.mismatch = fmt.Errorf("%s: its parts hold more than the %d bytes %s says", j.name, j.meta.Bytes, j.metaName)
				j.err = j.mismatch
				return n, j.err
			}
		}
		if err == io.EOF {
			err = j.cur.Close()
			j.cur = nil
		}
		if err != nil {
			j.err = err
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
	return 0, j.err
}

// end is what the stream ends with: io.EOF, or for a Zarf set whose bytes
// differ from what part000 says, the mismatch.
func (j *joined) end() error {
	if j.meta == nil {
		return io.EOF
	}
	switch got := hex.EncodeToString(j.sum.Sum(nil)); {
	case j.read != j.meta.Bytes:
		j.mismatch = fmt.Errorf("%s: its parts hold %d bytes, %s says %d", j.name, j.read, j.metaName, j.meta.Bytes)
	case got != j.meta.Sha256Sum:
		j.mismatch = fmt.Errorf("%s: its parts join to sha256 %s, %s says %s", j.name, got, j.metaName, j.meta.Sha256Sum)
	default:
		j.checked = true
		return io.EOF
	}
	return j.mismatch
}

// errUnchecked is what Close says of a Zarf set not read to its end: what
// was read is not known to be the bundle.
var errUnchecked = errors.New("not read to its end: its sha256 was not checked")

// Close closes the part being read. For a Zarf set, it returns the mismatch
// the end of the stream found, or, when the stream was not read to its end
// and no Read failed, errUnchecked (naming the bundle).
func (j *joined) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var err error
	if j.cur != nil {
		err = j.cur.Close()
		j.cur = nil
	}
	switch {
	case j.meta == nil || j.checked:
	case j.mismatch != nil:
		err = j.mismatch
	case j.err == nil:
		err = fmt.Errorf("%s: %w", j.name, errUnchecked)
	}
	if j.err == nil {
		j.err = os.ErrClosed
	}
	return err
}
