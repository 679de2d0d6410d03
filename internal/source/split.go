package source

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/lineerr"
	"github.com/holdfast-project/holdfast/internal/units"
)

// Split bundles: an archive cut into parts to fit removable media. The parts
// of one bundle in one directory are one source, named as the bundle joined
// (a path that need not exist). Three namings are known; X must end in one
// of archiveSuffixes, so that no other numbered file is taken for a part:
//
//	X.001, X.002, ...           raw cuts, no metadata (hauler store save
//	                            --chunk-size, 7-Zip, split -a 3); numbered
//	                            from X.000 when that is there (split -d -a 3)
//	X.part000, X.part001, ...   zarf package create --max-package-size:
//	                            part000 is JSON about the joined file
//	                            ({"Sha256Sum","Bytes","Count"}), then Count
//	                            raw cuts
//	haul_0.tar.zst, haul_1...   Hauler before v2.1, for its default name
//	                            (X = haul.tar.zst) only: <base>_<N>.tar.zst is
//	                            also how separate archives get numbered
//
// Numbers have at least 3 digits (Hauler and Zarf write 3), except haul_N.

// splitStyle is how the parts of a bundle are named.
type splitStyle int

const (
	numbered   splitStyle = iota + 1 // X.001
	zarfSplit                        // X.part000 + X.part001
	legacyHaul                       // haul_0.tar.zst
)

// part is one file of a split bundle.
type part struct {
	path  string
	style splitStyle
	n     int // its number
	width int // digits in its name
}

// zstdMagic starts a zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// parsePart reads a file name as a part of a split bundle: the bundle's file
// name (in the same directory) and the part (without its path).
func parsePart(name string) (string, part, bool) {
	if rest, n, w, ok := cutNumber(name, ".part"); ok && archiveSuffixed(rest) {
		return rest, part{style: zarfSplit, n: n, width: w}, true
	}
	if rest, n, w, ok := cutNumber(name, "."); ok && archiveSuffixed(rest) {
		return rest, part{style: numbered, n: n, width: w}, true
	}
	if num, ok := strings.CutPrefix(name, "haul_"); ok {
		if num, ok = strings.CutSuffix(num, ".tar.zst"); ok && num != "" && len(num) <= 9 &&
			strings.Trim(num, "0123456789") == "" && (num == "0" || num[0] != '0') {
			n, _ := strconv.Atoi(num)
			return "haul.tar.zst", part{style: legacyHaul, n: n}, true
		}
	}
	return "", part{}, false
}

// cutNumber cuts sep and 3 to 9 digits off the end of name.
func cutNumber(name, sep string) (rest string, n, width int, ok bool) {
	i := strings.LastIndex(name, sep)
	if i <= 0 {
		return "", 0, 0, false
	}
	digits := name[i+len(sep):]
	if len(digits) < 3 || len(digits) > 9 || strings.Trim(digits, "0123456789") != "" {
		return "", 0, 0, false
	}
	n, _ = strconv.Atoi(digits)
	return name[:i], n, len(digits), true
}

func archiveSuffixed(name string) bool {
	name = strings.ToLower(name)
	return slices.ContainsFunc(archiveSuffixes, func(s string) bool { return strings.HasSuffix(name, s) })
}

// isPart says whether the file at path, whose name parsePart read as p, is a
// part. A haul_N.tar.zst (N ≥ 1) that starts a zstd frame is a whole haul of
// its own: a cut of a haul (one zstd frame) starts inside the frame.
func isPart(path string, p part) bool {
	if p.style != legacyHaul || p.n == 0 {
		return true
	}
	f, err := Open(path)
	if err != nil {
		return true // the bundle's import says what is wrong
	}
	defer f.Close()
	head := make([]byte, len(zstdMagic))
	n, _ := io.ReadFull(f, head)
	return !bytes.Equal(head[:n], zstdMagic)
}

// partName is the file name of part n of the bundle named base.
func partName(base string, style splitStyle, width, n int) string {
	switch style {
	case zarfSplit:
		return fmt.Sprintf("%s.part%0*d", base, width, n)
	case legacyHaul:
		return fmt.Sprintf("haul_%d.tar.zst", n)
	}
	return fmt.Sprintf("%s.%0*d", base, width, n)
}

// addBundles adds the split bundles whose parts a scan found, by bundle path.
// Beside a file at the bundle's own path the parts are an error, not a
// source: that file is the source at that path.
func (res *Result) addBundles(groups map[string][]part, seen map[string]bool) {
	for _, path := range slices.Sorted(maps.Keys(groups)) {
		parts := groups[path]
		if _, err := os.Lstat(path); err == nil {
			res.Errors = append(res.Errors, besideWhole(path, parts))
			continue
		}
		src, err := bundleOf(path, parts)
		if err != nil {
			res.Errors = append(res.Errors, err)
			res.Unreadable = append(res.Unreadable, path)
			continue
		}
		if !seen[src.Path] {
			seen[src.Path] = true
			res.Sources = append(res.Sources, src)
		}
	}
}

func besideWhole(path string, parts []part) error {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = filepath.Base(p.path)
	}
	slices.Sort(names)
	return fmt.Errorf("%s is there whole: its split parts beside it (%s) are not read; remove them", path, strings.Join(names, ", "))
}

// bundleParts finds the parts of the split bundle at path in its directory:
// none when there are none or the directory cannot be read.
func bundleParts(path string) []part {
	dir, name := filepath.Dir(path), filepath.Base(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var parts []part
	for _, e := range entries {
		base, p, ok := parsePart(e.Name())
		if !ok || base != name || Ignored(e.Name()) {
			continue
		}
		p.path = filepath.Join(dir, e.Name())
		if reason, err := notRegular(p.path, e); err != nil || reason != "" || !isPart(p.path, p) {
			continue
		}
		parts = append(parts, p)
	}
	return parts
}

// bundleOf is the source of a split bundle at path made of parts (at least
// one): Size is what the parts join to, MtimeNs the newest part's, and
// Identity covers every part's name and identity. An error is a part that
// cannot be read, or parts named in two ways.
func bundleOf(path string, parts []part) (Source, error) {
	if len(parts) == 0 {
		return Source{}, fmt.Errorf("reading %s: no parts of it found", path)
	}
	slices.SortFunc(parts, func(a, b part) int {
		return cmp.Or(cmp.Compare(a.n, b.n), cmp.Compare(a.path, b.path))
	})
	for _, p := range parts[1:] {
		if p.style != parts[0].style {
			return Source{}, fmt.Errorf("%s: split parts named in two ways (%s, %s): not read", path, filepath.Base(parts[0].path), filepath.Base(p.path))
		}
	}
	src := Source{Path: path, Kind: Archive}
	h := sha256.New()
	for _, p := range parts {
		st, err := identify(p.path, Archive)
		if err != nil {
			return Source{}, err
		}
		fmt.Fprintf(h, "%s %s\n", filepath.Base(p.path), st.Identity)
		src.Parts = append(src.Parts, p.path)
		src.MtimeNs = max(src.MtimeNs, st.MtimeNs)
		if p.style != zarfSplit || p.n != 0 {
			src.Size += st.Size
		}
	}
	src.Identity = fmt.Sprintf("parts=%d,size=%d,mtime=%d,sha256=%x", len(parts), src.Size, src.MtimeNs, h.Sum(nil))
	src.Incomplete = incomplete(filepath.Base(path), parts, src.Size)
	return src, nil
}

// incomplete says why the sorted parts of the bundle named base do not make
// the whole bundle, or "" if, as far as names and sizes tell, they do.
func incomplete(base string, parts []part, size int64) string {
	style, width := parts[0].style, parts[len(parts)-1].width
	name := func(n int) string { return partName(base, style, width, n) }
	for i := 1; i < len(parts); i++ {
		if parts[i].n == parts[i-1].n {
			return fmt.Sprintf("%s and %s are both part %d", filepath.Base(parts[i-1].path), filepath.Base(parts[i].path), parts[i].n)
		}
	}
	last := parts[len(parts)-1].n
	switch style {
	case zarfSplit:
		if parts[0].n != 0 {
			return name(0) + " is missing (it gives the number of parts and their checksum)"
		}
		meta, err := readZarfMeta(parts[0].path)
		if err != nil {
			return err.Error()
		}
		data := parts[1:]
		if last > meta.Count {
			return fmt.Sprintf("%s counts %d parts, and there is %s", name(0), meta.Count, name(last))
		}
		if why := missing(name, 1, meta.Count, data); why != "" {
			return why
		}
		if size != meta.Bytes {
			return fmt.Sprintf("the parts hold %d bytes, %s says %d", size, name(0), meta.Bytes)
		}
		return ""
	case legacyHaul:
		return missing(name, 0, last, parts)
	}
	first := 1
	if parts[0].n == 0 {
		first = 0
	}
	return missing(name, first, last, parts)
}

// missing names the parts numbered first to last that parts lacks.
func missing(name func(int) string, first, last int, parts []part) string {
	have := map[int]bool{}
	for _, p := range parts {
		have[p.n] = true
	}
	var gone []string
	for n := first; n <= last; n++ {
		if !have[n] {
			gone = append(gone, name(n))
		}
	}
	count := last - first + 1
	switch {
	case len(gone) == 0:
		return ""
	case len(gone) == 1:
		return fmt.Sprintf("part %s of %d is missing", gone[0], count)
	case len(gone) > 3:
		return fmt.Sprintf("parts %s of %d are missing", units.List(gone, 3), count)
	}
	return fmt.Sprintf("parts %s and %s of %d are missing", strings.Join(gone[:len(gone)-1], ", "), gone[len(gone)-1], count)
}

// zarfMeta is a Zarf part000: the joined file's sha256 and size, and the
// number of data parts. Go's JSON field match is case-insensitive, so
// older Zarf's lower-case keys (sha256Sum, bytes, count) read alike.
type zarfMeta struct {
	Sha256Sum string
	Bytes     int64
	Count     int
}

// maxZarfMeta bounds what is read of a part000 (Zarf's is under 200 bytes).
const maxZarfMeta = 64 << 10

// readZarfMeta reads a part000. Its errors name the file, not its directory.
func readZarfMeta(path string) (zarfMeta, error) {
	name := filepath.Base(path)
	f, err := Open(path)
	if err != nil {
		return zarfMeta{}, fmt.Errorf("reading %s: %w", name, lineerr.Cause(err))
	}
	defer f.Close()
	b, err := files.ReadAll(f, maxZarfMeta)
	if errors.Is(err, files.ErrTooLarge) {
		return zarfMeta{}, fmt.Errorf("%s is larger than a part list (%s at most)", name, units.Whole(maxZarfMeta))
	}
	if err != nil {
		return zarfMeta{}, fmt.Errorf("reading %s: %w", name, lineerr.Cause(err))
	}
	var m zarfMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return zarfMeta{}, fmt.Errorf("%s is not a part list: %w", name, err)
	}
	m.Sha256Sum = strings.ToLower(m.Sha256Sum)
	if _, err := hex.DecodeString(m.Sha256Sum); err != nil || len(m.Sha256Sum) != 2*sha256.Size {
		return zarfMeta{}, fmt.Errorf("%s gives no sha256 (Sha256Sum %q)", name, m.Sha256Sum)
	}
	if m.Count < 1 || m.Bytes < 0 {
		return zarfMeta{}, fmt.Errorf("%s counts %d parts of %d bytes", name, m.Count, m.Bytes)
	}
	return m, nil
}
