package bench

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/archive"
)

// floorChunk is the size of each read and write of the floor: 1 MiB − 4 KiB,
// the fastest write size measured on this kind of VM (power-of-two sizes cost
// 2–5× more kernel time; see DESIGN.md).
const floorChunk = 1<<20 - 4<<10

// FloorResult is what WriteFloor wrote.
type FloorResult struct {
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
}

// WriteFloor does the least any import of the plain tar archive must do, in
// one stream: for every regular file in the tar (the blobs, plus the few small
// JSON files beside them) it reads the bytes, hashes them with sha256, writes
// them to a new file under dir, fsyncs and closes that file, and renames it to
// its digest. containerd's content store does the same per blob (and more:
// metadata, directory fsyncs, gRPC). dir is created; it should be on the
// filesystem the content store would use.
func WriteFloor(ctx context.Context, archive, dir string) (FloorResult, error) {
	var res FloorResult
	f, err := os.Open(archive)
	if err != nil {
		return res, fmt.Errorf("writing the floor of %s: %w", archive, err)
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("writing the floor of %s: %w", archive, err)
	}
	buf := make([]byte, floorChunk)
	tr := tar.NewReader(f)
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("writing the floor of %s: reading the tar: %w", archive, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		n, err := writeFloorBlob(ctx, tr, dir, res.Blobs, buf)
		if err != nil {
			return res, fmt.Errorf("writing the floor of %s: %s: %w", archive, hdr.Name, err)
		}
		res.Blobs++
		res.Bytes += n
	}
	return res, nil
}

// writeFloorBlob copies r into a new file under dir, hashing it, fsyncs it and
// renames it to its sha256.
func writeFloorBlob(ctx context.Context, r io.Reader, dir string, i int, buf []byte) (int64, error) {
	tmp := filepath.Join(dir, fmt.Sprintf("ingest-%d", i))
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			out.Close()
			return n, err
		}
		m, rerr := r.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			if _, err := out.Write(buf[:m]); err != nil {
				out.Close()
				return n, err
			}
			n += int64(m)
		}
		if errors.Is(rerr, io.EOF) { // the end of the entry (a cut-off tar gives io.ErrUnexpectedEOF)
			break
		}
		if rerr != nil {
			out.Close()
			return n, rerr
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return n, err
	}
	if err := out.Close(); err != nil {
		return n, err
	}
	return n, os.Rename(tmp, filepath.Join(dir, hex.EncodeToString(h.Sum(nil))))
}

// DecodeFloor does the least any import of a compressed archive must do: it
// decompresses the whole stream, with the decoder, the options and the reads
// holdfast's walk uses (archive.Drain), and discards the bytes. For a
// .tar.zst, one zstd frame, that is one decoder working through the frame in
// order. It returns the decompressed size; a stream that is not compressed,
// or that ends early or is corrupt, is an error.
func DecodeFloor(ctx context.Context, path string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("decoding %s: %w", path, err)
	}
	defer f.Close()
	n, c, err := archive.Drain(f)
	if err != nil {
		return n, fmt.Errorf("decoding %s: %w", path, err)
	}
	if c == archive.None {
		return n, fmt.Errorf("decoding %s: not compressed", path)
	}
	return n, nil
}
