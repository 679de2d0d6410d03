package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/pattern"
)

// PinFile is a pin list that commands edit (holdfast pin and unpin edit the
// data dir's local.pins). Each edit holds a lock of its own, a file beside
// the list (".NAME.lock"), separate from the data dir's: edits work while an
// agent owns the data dir, and two of them never lose one another's. Lines
// an edit keeps come back byte for byte; comments and order stay.
type PinFile struct {
	// Path is the list. Its dir is made when missing.
	Path string
	// DataDir, when set, is made first when missing, private (0700), as
	// holdfast makes its data dir: the list's dir is in it.
	DataDir string
}

// Pinned is what Add did with one pattern given.
type Pinned struct {
	Pattern string // as given
	// Line is the line (from 1) that already had the pattern, in any
	// spelling that normalises the same, and Listed its pattern as
	// written; Line is 0 when the pattern was added.
	Line   int
	Listed string
}

// Unpinned is what Remove did.
type Unpinned struct {
	Removed []string // the patterns of the lines removed, as written, in order
	Missing []string // the patterns given that no line had
}

// PatternsError refuses the patterns given to an edit, one error each for
// those that are not patterns: nothing was changed.
type PatternsError struct{ Err error }

func (e *PatternsError) Error() string { return e.Err.Error() }

func (e *PatternsError) Unwrap() error { return e.Err }

// Add appends each pattern no line of the list has (in any spelling that
// normalises the same), in order. Every pattern is checked before anything
// is changed; the list is written, durably, before Add returns what it did.
func (f PinFile) Add(ctx context.Context, patterns []string) ([]Pinned, error) {
	pats, err := parsePatterns(patterns)
	if err != nil {
		return nil, err
	}
	var done []Pinned
	err = f.edit(ctx, func(lines []string) []string {
		for i, p := range pats {
			if n, raw, ok := findPattern(lines, p, nil); ok {
				done = append(done, Pinned{Pattern: patterns[i], Line: n + 1, Listed: raw})
				continue
			}
			lines = append(lines, patterns[i])
			done = append(done, Pinned{Pattern: patterns[i]})
		}
		return lines
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// Remove removes every line whose pattern is one of patterns (in any
// spelling that normalises the same). Every pattern is checked before
// anything is changed; the list is written, durably, before Remove returns
// what it did. A pattern no line has is in Unpinned.Missing, not an error.
func (f PinFile) Remove(ctx context.Context, patterns []string) (Unpinned, error) {
	pats, err := parsePatterns(patterns)
	if err != nil {
		return Unpinned{}, err
	}
	var done Unpinned
	err = f.edit(ctx, func(lines []string) []string {
		removed := map[int]bool{}
		for i, p := range pats {
			found := false
			for {
				n, raw, ok := findPattern(lines, p, removed)
				if !ok {
					break
				}
				removed[n], found = true, true
				done.Removed = append(done.Removed, raw)
			}
			if !found {
				done.Missing = append(done.Missing, patterns[i])
			}
		}
		kept := lines[:0:0]
		for n, l := range lines {
			if !removed[n] {
				kept = append(kept, l)
			}
		}
		return kept
	})
	if err != nil {
		return Unpinned{}, err
	}
	return done, nil
}

// parsePatterns parses every pattern before anything is changed.
func parsePatterns(args []string) ([]pattern.Pattern, error) {
	pats, err := pattern.ParseAll(args)
	if err != nil {
		return nil, &PatternsError{err}
	}
	return pats, nil
}

// findPattern returns the first line not in skip whose pattern is p, and its
// content (without comment).
func findPattern(lines []string, p pattern.Pattern, skip map[int]bool) (int, string, bool) {
	for n, l := range lines {
		if skip[n] {
			continue
		}
		content := ListContent(l)
		if content == "" {
			continue
		}
		if q, err := pattern.Parse(content); err == nil && q == p {
			return n, content, true
		}
	}
	return 0, "", false
}

// edit runs edit on the lines of the list (a header only, if it does not
// exist) under the list's lock, and writes the result atomically if it
// changed.
func (f PinFile) edit(ctx context.Context, edit func(lines []string) []string) error {
	if f.DataDir != "" {
		if err := os.MkdirAll(f.DataDir, 0o700); err != nil {
			return fmt.Errorf("creating data dir: %w", err)
		}
	}
	dir := filepath.Dir(f.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	unlock, err := files.Lock(ctx, filepath.Join(dir, "."+filepath.Base(f.Path)+".lock"))
	if err != nil {
		return err
	}
	defer unlock()

	perm := fs.FileMode(0o644)
	data, err := os.ReadFile(f.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = []byte(newPinsHeader)
	case err != nil:
		return fmt.Errorf("reading %s: %w", f.Path, err)
	default:
		if fi, err := os.Stat(f.Path); err == nil {
			perm = fi.Mode().Perm()
		}
	}
	text := string(data)
	var lines []string
	if text != "" {
		lines = strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	}
	edited := edit(slices.Clone(lines))
	if slices.Equal(edited, lines) {
		return nil
	}
	updated := ""
	if len(edited) > 0 {
		updated = strings.Join(edited, "\n") + "\n"
	}
	// Durable, the rename included, before anything is said.
	if err := files.WriteFile(f.Path, []byte(updated), perm); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	return nil
}

const newPinsHeader = `# Pin list of this node, edited by "holdfast pin" and "holdfast unpin".
# One pattern per line; "#" starts a comment. See "holdfast pin --help".
`
