package report

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
)

// HeldImage is an image record a node holds: its name, the digest it points
// at, and whether the CRI sees it pinned.
type HeldImage struct {
	Name   string
	Digest string
	Pinned bool
}

// Held is what a node holds, sorted by name. Its text form is a line per
// record, "<digest> <p|-> <name>", what GET /held serves; Pack gzips it for
// the node's NodeImages object.
type Held []HeldImage

// Sort sorts h by name.
func (h Held) Sort() { sort.Slice(h, func(i, j int) bool { return h[i].Name < h[j].Name }) }

// Text is h a line per record.
func (h Held) Text() []byte {
	var b bytes.Buffer
	for _, img := range h {
		flag := "-"
		if img.Pinned {
			flag = "p"
		}
		fmt.Fprintf(&b, "%s %s %s\n", img.Digest, flag, img.Name)
	}
	return b.Bytes()
}

// Hash names the text of h: equal hashes, equal contents.
func (h Held) Hash() string {
	sum := sha256.Sum256(h.Text())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseHeld reads Held's text form; a line that is not one is an error
// naming it.
func ParseHeld(text []byte) (Held, error) {
	var h Held
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, " ", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[0], "sha256:") || (parts[1] != "p" && parts[1] != "-") || parts[2] == "" {
			return nil, fmt.Errorf("held images, line %d: %q is not \"<digest> <p|-> <name>\"", n, line)
		}
		h = append(h, HeldImage{Name: parts[2], Digest: parts[0], Pinned: parts[1] == "p"})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("held images: %w", err)
	}
	return h, nil
}

// maxHeldText bounds what Unpack inflates: 256 MiB is a million records
// and more, and stops a small object from inflating without end.
const maxHeldText = 256 << 20

// Pack is h's text, gzipped.
func (h Held) Pack() []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression) // the level is valid
	_, _ = zw.Write(h.Text())                              // a bytes.Buffer does not fail
	_ = zw.Close()
	return b.Bytes()
}

// Unpack reads what Pack wrote.
func Unpack(packed []byte) (Held, error) {
	zr, err := gzip.NewReader(bytes.NewReader(packed))
	if err != nil {
		return nil, fmt.Errorf("held images: %w", err)
	}
	text, err := io.ReadAll(io.LimitReader(zr, maxHeldText+1))
	if err != nil {
		return nil, fmt.Errorf("held images: %w", err)
	}
	if len(text) > maxHeldText {
		return nil, fmt.Errorf("held images: more than %d bytes unpacked", maxHeldText)
	}
	return ParseHeld(text)
}
