package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/units"
)

// importHelp is the long help of holdfast import.
const importHelp = `import reads each archive (docker save, OCI, compressed or not) or OCI layout
directory into containerd, pins its images and leases their content as a kept
source: it no longer depends on the file. The file may then be deleted or moved
to get the disk back; its images stay pinned, and holdfast heals them from the
leased content, until "holdfast release" ends the kept source.

That a source is kept lives in containerd, on its lease (labels
io.holdfast.kept, io.holdfast.source, io.holdfast.imported-at): restarts of
holdfast or containerd, and a lost data dir, change nothing.

Bundles are taken as they come: a Hauler haul (hauler store save, whole or
split into .001, .002, ... parts), a Zarf package (zarf package create, whole or
split into .part000, .part001, ...), a cosign layout (cosign save --dir): only
their images are imported, under the names the bundle gives them, never a
signature, attestation, SBOM, chart or file. A cosign layout names no image:
give its name with --name REF.

With -, the archive is read from standard input (holdfast export -o - | ssh
node holdfast import -), in any format and compression a file may have; it is
not spooled to disk. Its identity is the digest of the bytes read, known once
they are read: the kept source is named stdin@sha256:<first 12 hex digits>,
the name status shows and release takes. The same bytes again are the same
kept source; other bytes are another kept source, replacing none. /dev/stdin
is read as -; a named pipe given as a path is refused: connect it to
standard input and give -.

Importing the same file again reads nothing (the file's identity is its size,
mtime, inode and ctime). Importing a changed file at the same path replaces the
earlier kept import: the new content is leased and pinned first, then the
earlier lease is released and the names only it wanted are unpinned. Two
different paths are two kept sources; a name both want at different targets
goes to the newest file, as between images-dir sources.

While holdfast run owns the data dir, import talks to its containerd; the agent
takes the kept source in at once.

Exit status: 0 when every path was imported, 1 when any failed (the others are
still imported; each failure is printed as "error: import <path>: <cause>", and
a failed import leaves nothing behind), 2 on bad usage.`

func newImport(o *options) *cobra.Command {
	var (
		progress progressFlag
		name     string
	)
	cmd := &cobra.Command{
		Use:   "import FILE|DIR|-...",
		Short: "Import archives or OCI layout dirs once, and keep their images pinned until released",
		Long:  importHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("import: give at least one archive or OCI layout directory")}
			}
			if name != "" && len(args) > 1 {
				return &usageError{errors.New("import: --name names the image of one path; give one")}
			}
			return stdinOnce("import", args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := o.openReader(ctx, "import")
			if err != nil {
				return err
			}
			defer s.close()
			if _, err := runtime.CheckServer(ctx, s.rt, o.log); err != nil {
				return err
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			failed := 0
			// The total line is for more than one path.
			// What the pin and pull lists want, read once for every path: an
			// import that replaces an earlier one unpins nothing they want.
			dirs, err := o.layout().ImageDirs(o.images)
			if err != nil {
				return err
			}
			standing := pass.ReadStanding(dirs, o.insecurePerms)
			d := o.newProgress(cmd, progress, len(args) > 1)
			upTo := d.Announce(args)
			for i, path := range args {
				d.Start()
				opts := pass.KeepOptions{Progress: d.Hook(), Name: name, Policy: o.policy}
				var (
					k   pass.Kept
					err error
				)
				if source.IsStdin(path) {
					var in io.Reader
					if in, err = stdinOf(ctx, cmd); err == nil {
						k, err = pass.KeepStream(ctx, s.rt, in, standing, opts)
					} else {
						err = fmt.Errorf("import %s: %w", pass.StreamName, err)
					}
				} else {
					k, err = pass.Keep(ctx, s.rt, path, standing, opts)
				}
				d.Stop()
				d.Passed(upTo[i])
				for _, n := range slices.Sorted(maps.Keys(k.Verdicts)) {
					fmt.Fprintf(out, "%s: signature: %s\n", n, k.Verdicts[n])
				}
				for _, c := range k.Conflicts {
					fmt.Fprintf(out, "conflict: %s\n", c)
				}
				if err != nil {
					fmt.Fprintf(errOut, "error: %v\n", err)
					failed++
					continue
				}
				r := k.Result
				if r.Unchanged {
					fmt.Fprintf(out, "%s: unchanged, %d images kept (lease %s)\n", k.Path, imageCount(r.Images), r.Lease)
				} else {
					fmt.Fprintf(out, "%s: imported and kept, %d images, %d blobs written, %d present, %s read (lease %s)\n",
						k.Path, imageCount(r.Images), r.Written, r.Present, units.Bytes(r.BytesRead), r.Lease)
				}
				for _, l := range k.Replaced {
					fmt.Fprintf(out, "%s: replaced the earlier import (lease %s)\n", k.Path, l)
				}
				for _, n := range k.Unpinned {
					fmt.Fprintf(out, "unpinned %s\n", n)
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
		Annotations: writes,
	}
	addProgressFlag(cmd, &progress)
	cmd.Flags().StringVar(&name, "name", "", "name the image of a cosign layout (cosign save), whose index names none; with --name, give one path")
	return cmd
}

// stdinOnce refuses standard input named more than once: it is read once.
func stdinOnce(command string, args []string) error {
	n := 0
	for _, a := range args {
		if source.IsStdin(a) {
			n++
		}
	}
	if n > 1 {
		return &usageError{fmt.Errorf("%s: standard input (-) is read once; give it once", command)}
	}
	return nil
}

// spoolDirs returns the spool dirs, absolute, created if missing.
func (o *options) spoolDirs() ([]string, error) {
	var dirs []string
	for _, d := range o.spool {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("creating spool dir: %w", err)
		}
		dirs = append(dirs, abs)
	}
	return dirs, nil
}

// imageCount counts the images of wants: the records of their signatures
// (runtime.Want.Signs) are none.
func imageCount(wants []runtime.Want) int {
	n := 0
	for _, w := range wants {
		if w.Signs == "" {
			n++
		}
	}
	return n
}
