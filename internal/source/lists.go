package source

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/holdfast-project/holdfast/internal/lineerr"
	"github.com/holdfast-project/holdfast/internal/pattern"
)

// LineError is what is wrong with one line of a list.
type LineError = lineerr.Error

// ListKind is what a list is for. Pull lists and the peer list share one
// grammar (ReadPullList, ReadPeerList); what differs is who writes the file
// and how long a failed pull waits for its next try.
type ListKind string

const (
	Pulls ListKind = "pulls" // a *.txt pull list: references to pull, pin and lease
	Pins  ListKind = "pins"  // a *.pins pin list: patterns of names to pin
	// Peers is the peer source (holdfast run --pull-required): a pull list
	// the agent writes, of the images the node's workloads need, pulled
	// through the node's peers.
	Peers ListKind = "peers"
)

// PullListFile is a parsed *.txt pull list, or the peer list.
type PullListFile struct {
	Path    string
	Kind    ListKind    // Pulls or Peers
	Entries []PullEntry // in file order, each reference once
	Errors  []LineError // lines that are not references; the others still count
}

// PullEntry is one reference of a pull list.
type PullEntry struct {
	Line int    // from 1
	Ref  string // normalised full reference: docker.io/library/nginx:latest
	Raw  string // as written, without comment and surrounding whitespace
}

// PinListFile is a parsed *.pins pin list.
type PinListFile struct {
	Path     string
	Kind     ListKind     // Pins
	Patterns []PinPattern // in file order, each pattern once
	Errors   []LineError  // lines that are not patterns; the others still count
}

// PinPattern is one pattern of a pin list.
type PinPattern struct {
	Line    int    // from 1
	Raw     string // as written, without comment and surrounding whitespace
	Pattern pattern.Pattern
}

// ReadPullList reads a pull list: one image reference per line, by tag or
// digest (name@sha256:…, name:tag@sha256:…); a name with neither means
// :latest. Blank lines and comments are ignored: a "#" that starts a line
// (after any whitespace) or follows whitespace starts a comment. A bad line
// is reported in Errors and the others still count; a reference listed again
// (after normalisation) is dropped silently. The error is only for a file
// that can't be read.
func ReadPullList(path string) (PullListFile, error) {
	data, err := readList(path)
	if err != nil {
		return PullListFile{}, err
	}
	return parsePullList(path, data), nil
}

// ReadPeerList reads the peer list at path: a pull list of kind Peers.
func ReadPeerList(path string) (PullListFile, error) {
	data, err := readList(path)
	if err != nil {
		return PullListFile{}, err
	}
	l := parsePullList(path, data)
	l.Kind = Peers
	return l, nil
}

// parsePullList parses the bytes of a pull list read from path.
func parsePullList(path string, data []byte) PullListFile {
	lines := listLines(data)
	l := PullListFile{Path: path, Kind: Pulls}
	seen := map[string]bool{}
	for _, ln := range lines {
		if len(strings.Fields(ln.text)) > 1 {
			l.Errors = append(l.Errors, LineError{Path: path, Line: ln.n, Err: fmt.Errorf("invalid reference %q: one reference per line", ln.text)})
			continue
		}
		ref, err := pattern.NormalizeRef(ln.text)
		if err != nil {
			l.Errors = append(l.Errors, LineError{Path: path, Line: ln.n, Err: err})
			continue
		}
		if seen[ref] {
			continue
		}
		seen[ref] = true
		l.Entries = append(l.Entries, PullEntry{Line: ln.n, Ref: ref, Raw: ln.text})
	}
	return l
}

// ReadPinList reads a pin list: one pattern per line (see package pattern),
// with the comment and blank-line rules of ReadPullList. A bad line is
// reported in Errors and the others still count; a pattern listed again
// (after normalisation: nginx and docker.io/library/nginx are one pattern)
// is dropped silently. The error is only for a file that can't be read.
func ReadPinList(path string) (PinListFile, error) {
	data, err := readList(path)
	if err != nil {
		return PinListFile{}, err
	}
	return parsePinList(path, data), nil
}

// parsePinList parses the bytes of a pin list read from path.
func parsePinList(path string, data []byte) PinListFile {
	lines := listLines(data)
	l := PinListFile{Path: path, Kind: Pins}
	seen := map[pattern.Pattern]bool{}
	for _, ln := range lines {
		p, err := pattern.Parse(ln.text)
		if err != nil {
			l.Errors = append(l.Errors, LineError{Path: path, Line: ln.n, Err: err})
			continue
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		l.Patterns = append(l.Patterns, PinPattern{Line: ln.n, Raw: ln.text, Pattern: p})
	}
	return l
}

// Bounds of a list (docs/security.md): a pull or pin list larger than
// MaxListBytes or longer than MaxListLines is refused whole, with an error
// naming it, before it is parsed.
const (
	MaxListBytes = 4 << 20
	MaxListLines = 100_000
)

// listLine is the content of one non-blank line of a list.
type listLine struct {
	n    int
	text string
}

// readList reads a list within its bounds.
func readList(path string) ([]byte, error) {
	data, err := readFileLimit(path, MaxListBytes)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, lineerr.Cause(err))
	}
	if n := lineCount(data); n > MaxListLines {
		return nil, fmt.Errorf("reading %s: %d lines, more than a list may have (%d)", path, n, MaxListLines)
	}
	return data, nil
}

// lineCount is the number of lines in data: a newline ends a line, and text
// after the last one is a line too.
func lineCount(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// listLines returns the content of each line of a list that has any, with
// comments and surrounding whitespace removed.
func listLines(data []byte) []listLine {
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a byte-order mark some editors write
	var out []listLine
	for i, line := range strings.Split(string(data), "\n") {
		if text := ListContent(line); text != "" {
			out = append(out, listLine{n: i + 1, text: text})
		}
	}
	return out
}

// ListContent is what a line of a list holds: the line without its comment
// (from a "#" at the start or after whitespace) and surrounding whitespace.
// An empty result is a blank or comment line.
func ListContent(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || isSpace(line[i-1])) {
			line = line[:i]
			break
		}
	}
	return strings.TrimSpace(line)
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\r' || b == '\v' || b == '\f'
}
