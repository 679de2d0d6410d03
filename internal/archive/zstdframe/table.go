package zstdframe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The seekable zstd format (zstd's contrib/seekable_format): independent
// frames, then a seek table in a skippable frame that ends with a footer.
const (
	tableMagic    = 0x184D2A5E // the skippable frame that holds the table
	seekableMagic = 0x8F92EAB1 // the footer's last four bytes
	footerSize    = 9          // frame count, descriptor, magic
	checksumFlag  = 0x80       // descriptor: entries carry a checksum
	reservedBits  = 0x7c       // descriptor: must be zero
	entrySize     = 8          // compressed size, decompressed size
	entrySizeXXH  = 12         // the same and a checksum
)

// Table is a parsed seek table: the frames it says and, unless only its
// footer was read, each one's sizes and checksum.
type Table struct {
	Count   uint64 // the frames it says
	Sums    bool   // its entries carry checksums
	entries []byte // its entries as written; none when only the footer was read
}

// Len is how many entries t holds: Count, or 0 when only its footer was
// read.
func (t *Table) Len() int { return len(t.entries) / t.entrySize() }

func (t *Table) entrySize() int {
	if t.Sums {
		return entrySizeXXH
	}
	return entrySize
}

// Frame is entry i of t: the frame's sizes and, if t.Sums, its checksum.
// A table says no offsets: Off is 0.
func (t *Table) Frame(i int) Frame {
	e := t.entries[i*t.entrySize():]
	f := Frame{Comp: uint64(binary.LittleEndian.Uint32(e[0:4])), Size: uint64(binary.LittleEndian.Uint32(e[4:8]))}
	if t.Sums {
		f.Sum, f.HasSum = binary.LittleEndian.Uint32(e[8:12]), true
	}
	return f
}

// errNotTable says a skippable frame with the seek table's magic does
// not end as a seek table does (another use of the magic), or declares
// reserved bits: it is not read as one.
var errNotTable = errors.New("not a seek table")

// parseTable reads the payload of a seek table's skippable frame (after
// its magic and size), keeping p. The footer must be whole and say as many
// entries as the payload holds.
func parseTable(p []byte) (Table, error) {
	if len(p) < footerSize {
		return Table{}, errNotTable
	}
	t, err := parseFooter(p[len(p)-footerSize:])
	if err != nil {
		return t, err
	}
	size := t.entrySize()
	body := p[:len(p)-footerSize]
	if uint64(len(body)) != t.Count*uint64(size) {
		return Table{}, fmt.Errorf("its footer says %d frames (%d bytes of entries), it holds %d bytes of entries", t.Count, t.Count*uint64(size), len(body))
	}
	t.entries = body
	return t, nil
}

// parseFooter reads a seek table's footer: the number of frames and
// whether entries carry checksums.
func parseFooter(foot []byte) (Table, error) {
	desc := foot[4]
	if len(foot) != footerSize || binary.LittleEndian.Uint32(foot[5:9]) != seekableMagic || desc&reservedBits != 0 {
		return Table{}, errNotTable
	}
	return Table{Count: uint64(binary.LittleEndian.Uint32(foot[0:4])), Sums: desc&checksumFlag != 0}, nil
}

// checkTable compares a seek table with the frames read since the last one:
// their number, and each one's compressed and decompressed sizes. Its
// checksums are compared with the frames' own checksum fields, which the
// decoder checks against their content; a frame without one is not hashed
// for the table's sake.
func (z *Reader) checkTable(u *unit) error {
	t := u.table
	defer func() { z.records, z.counted = z.records[:0], 0 }()
	if t.Count != z.counted {
		return markerErr("zstd: the seek table at offset %d says %d frames, there are %d", u.off, t.Count, z.counted)
	}
	for i := range min(t.Len(), len(z.records)) {
		e, r := t.Frame(i), z.records[i]
		switch {
		case e.Comp != r.Comp:
			return markerErr("zstd: the seek table says frame %d (at offset %d) is %d bytes compressed, it is %d", i, r.Off, e.Comp, r.Comp)
		case e.Size != r.Size:
			return tableSizeErr(i, r.Off, e.Size, r.Size)
		case e.HasSum && r.HasSum && e.Sum != r.Sum:
			return tableSumErr(i, r.Off, e.Sum, r.Sum)
		}
	}
	return nil
}

// tableSizeErr says a seek table's entry for frame i, at offset off, gives
// a content size the frame does not have (is: its size, or "more"); the
// stream (checkTable) and the read by the table (File) say it
// alike.
func tableSizeErr(i int, off int64, said uint64, is any) error {
	return markerErr("zstd: the seek table says frame %d (at offset %d) decompresses to %d bytes, it is %v", i, off, said, is)
}

// tableSumErr says a seek table's entry for frame i gives a checksum that is
// not the frame's.
func tableSumErr(i int, off int64, said, is uint32) error {
	return markerErr("zstd: the seek table says frame %d (at offset %d) has checksum %08x, the frame %08x", i, off, said, is)
}
