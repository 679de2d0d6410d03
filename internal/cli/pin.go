package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/source"
)

const patternHelp = `A pattern is an image reference, a prefix ending in "*" or a "*keyword*",
normalised as docker normalises names and matched against full image names:
  nginx                        every tag and digest of docker.io/library/nginx
  nginx:1.25                   that tag only
  registry.example.com/team/*  every image under registry.example.com/team/
  nginx:1.*                    the tags of nginx starting with "1."
  *ingress*                    every image whose full name contains "ingress"`

func newPin(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "pin [PATTERN...]",
		Short: "Pin images matching a pattern (edits <data-dir>/pins/local.pins); without arguments, list the patterns",
		Long: `pin adds each PATTERN to <data-dir>/pins/local.pins, the pin list of this node;
the agent pins every image that matches a pattern of it. A pattern already listed
(in any spelling that normalises the same) is left as it is. Without PATTERN,
pin lists the patterns of local.pins.

` + patternHelp + `

pin and unpin only edit the file: they work while holdfast run owns the data dir.

Exit status: 0 on success, 1 when local.pins can't be read or written (or, when
listing, holds a bad line), 2 on a bad pattern (nothing is changed then).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := localPins(o.dataDir)
			if len(args) == 0 {
				return listPins(cmd.OutOrStdout(), cmd.ErrOrStderr(), path)
			}
			pats, err := parsePatterns(args)
			if err != nil {
				return err
			}
			// What is said is said once the list is durably written.
			var out bytes.Buffer
			err = editPins(cmd.Context(), o.dataDir, func(lines []string) ([]string, error) {
				for i, p := range pats {
					if n, raw, ok := findPattern(lines, p, nil); ok {
						if raw == args[i] {
							fmt.Fprintf(&out, "pattern %q is already pinned in %s (line %d)\n", args[i], path, n+1)
						} else {
							fmt.Fprintf(&out, "pattern %q is already pinned in %s (line %d: %q)\n", args[i], path, n+1, raw)
						}
						continue
					}
					lines = append(lines, args[i])
					fmt.Fprintf(&out, "pinned pattern %q in %s\n", args[i], path)
				}
				return lines, nil
			})
			if err != nil {
				return err
			}
			_, err = out.WriteTo(cmd.OutOrStdout())
			return err
		},
	}
}

func newUnpin(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "unpin PATTERN...",
		Short: "Remove patterns from <data-dir>/pins/local.pins",
		Long: `unpin removes each PATTERN from <data-dir>/pins/local.pins: every line whose
pattern normalises the same (unpin nginx removes a line docker.io/library/nginx).
Images another source or pattern still wants stay pinned. Unpinning does not
free disk at once: the CRI keeps its own record of an image until the kubelet's
image GC removes it.

` + patternHelp + `

Exit status: 0 when every PATTERN was removed, 1 when one was not in the file
(the others are still removed) or the file can't be written, 2 on a bad pattern
(nothing is changed then).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("unpin: give at least one pattern")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			pats, err := parsePatterns(args)
			if err != nil {
				return err
			}
			path := localPins(o.dataDir)
			var out bytes.Buffer // said once the list is durably written
			var missing []error
			err = editPins(cmd.Context(), o.dataDir, func(lines []string) ([]string, error) {
				removed := map[int]bool{}
				for i, p := range pats {
					found := false
					for {
						n, raw, ok := findPattern(lines, p, removed)
						if !ok {
							break
						}
						removed[n], found = true, true
						fmt.Fprintf(&out, "unpinned pattern %q in %s\n", raw, path)
					}
					if !found {
						missing = append(missing, fmt.Errorf("pattern %q is not in %s", args[i], path))
					}
				}
				kept := lines[:0:0]
				for n, l := range lines {
					if !removed[n] {
						kept = append(kept, l)
					}
				}
				return kept, nil
			})
			if err != nil {
				return err
			}
			if _, err := out.WriteTo(cmd.OutOrStdout()); err != nil {
				return err
			}
			if len(missing) > 0 {
				return &ExitError{Code: 1, Err: errors.Join(missing...)}
			}
			return nil
		},
	}
}

// localPins is the pin list that pin and unpin edit.
func localPins(dataDir string) string {
	return filepath.Join(dataDir, "pins", "local.pins")
}

// parsePatterns validates every argument before anything is changed; a bad
// one is a usage error.
func parsePatterns(args []string) ([]pattern.Pattern, error) {
	pats := make([]pattern.Pattern, len(args))
	var errs []error
	for i, a := range args {
		p, err := pattern.Parse(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pats[i] = p
	}
	if len(errs) > 0 {
		return nil, &usageError{errors.Join(errs...)}
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
		content := source.ListContent(l)
		if content == "" {
			continue
		}
		if q, err := pattern.Parse(content); err == nil && q == p {
			return n, content, true
		}
	}
	return 0, "", false
}

// listPins prints the patterns of a pin list, one per line as written; bad
// lines go to stderr and make it exit 1.
func listPins(out, errOut io.Writer, path string) error {
	l, err := source.ReadPinList(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(errOut, "no local pins: %s does not exist\n", path)
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range l.Patterns {
		fmt.Fprintln(out, p.Raw)
	}
	for _, e := range l.Errors {
		fmt.Fprintf(errOut, "error: %v\n", e)
	}
	if len(l.Errors) > 0 {
		return &ExitError{Code: 1}
	}
	return nil
}

// editPins runs edit on the lines of local.pins (none if it does not exist)
// under the pins lock, and writes the result atomically if it changed. Lines
// edit keeps come back byte for byte; comments and order stay.
func editPins(ctx context.Context, dataDir string, edit func(lines []string) ([]string, error)) error {
	dir := filepath.Join(dataDir, "pins")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".local.pins.lock"))
	if err != nil {
		return err
	}
	defer unlock()

	path := localPins(dataDir)
	perm := fs.FileMode(0o644)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = []byte(newPinsHeader)
	case err != nil:
		return fmt.Errorf("reading %s: %w", path, err)
	default:
		if fi, err := os.Stat(path); err == nil {
			perm = fi.Mode().Perm()
		}
	}
	text := string(data)
	var lines []string
	if text != "" {
		lines = strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	}
	edited, err := edit(slices.Clone(lines))
	if err != nil {
		return err
	}
	if slices.Equal(edited, lines) {
		return nil
	}
	updated := ""
	if len(edited) > 0 {
		updated = strings.Join(edited, "\n") + "\n"
	}
	// Durable, the rename included, before anything is said.
	if err := datadir.WriteFileAtomic(path, []byte(updated), perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

const newPinsHeader = `# Pin list of this node, edited by "holdfast pin" and "holdfast unpin".
# One pattern per line; "#" starts a comment. See "holdfast pin --help".
`

// lockFile takes an exclusive flock on path, waiting for it until ctx ends.
// The lock is separate from the data dir's, so pin and unpin work while
// holdfast run owns the data dir, and two of them never lose an edit.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	delay := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}
