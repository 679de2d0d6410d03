package archive

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/dsnet/compress/bzip2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// fuzzReadCap bounds what a fuzz target reads of a decompressed stream: a
// small input may expand a thousandfold, and the targets must stay fast.
const fuzzReadCap = 4 << 20

var fuzzCompressions = []Compression{None, Gzip, Zstd, Bzip2, Xz, Lz4}

// FuzzDecompress feeds Sniff, Decompress and Probe hostile bytes. Sniff and
// Decompress agree on the compression; an uncompressed stream comes back
// byte for byte; a decoding error names the compression and stays; Probe
// agrees with both and says "tar" only for a tar header block.
func FuzzDecompress(f *testing.F) {
	tarb := tarBytes(f, []entry{{name: "a", data: []byte("hello\n")}})
	seeds := map[string][]any{
		"plain-tar": {tarb},
		"text":      {[]byte("not an archive\n")},
		"empty":     {[]byte{}},
		"skippable": {append([]byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4}, compress(f, Zstd, tarb)...)},
		"bzh-name":  {append([]byte("BZh9"), tarb[4:]...)},
	}
	for _, c := range fuzzCompressions[1:] {
		seeds[string(c)+"-tar"] = []any{compress(f, c, tarb)}
		full := compress(f, c, tarb)
		seeds[string(c)+"-truncated"] = []any{full[:len(full)*2/3]}
	}
	testenv.Seeds(f, seeds)

	f.Fuzz(func(t *testing.T, b []byte) {
		want := Sniff(b)
		if again := Sniff(b); again != want {
			t.Fatalf("Sniff not deterministic: %s then %s", want, again)
		}
		rc, c, err := decompress(bytes.NewReader(b), 1<<20)
		if c != want {
			t.Fatalf("Sniff says %s, Decompress %s", want, c)
		}
		if err != nil {
			if c == None {
				t.Fatalf("uncompressed input gave an error: %v", err)
			}
			if !strings.HasPrefix(err.Error(), string(c)+":") {
				t.Fatalf("error %q does not name %s", err, c)
			}
		} else {
			out, rerr := io.ReadAll(io.LimitReader(rc, fuzzReadCap))
			if c == None && (rerr != nil || !bytes.Equal(out, b)) {
				t.Fatalf("uncompressed input not passed through: %d of %d bytes, %v", len(out), len(b), rerr)
			}
			if rerr != nil {
				if !strings.HasPrefix(rerr.Error(), string(c)+":") {
					t.Fatalf("read error %q does not name %s", rerr, c)
				}
				if _, again := rc.Read(make([]byte, 16)); again == nil {
					t.Fatalf("error %v not sticky", rerr)
				}
			}
			if cerr := rc.Close(); cerr != nil && !strings.HasPrefix(cerr.Error(), string(c)+":") {
				t.Fatalf("close error %q does not name %s", cerr, c)
			}
		}
		pc, isTar, perr := Probe(bytes.NewReader(b))
		if pc != want {
			t.Fatalf("Probe says %s, Sniff %s", pc, want)
		}
		if perr == nil && isTar && c == None && !IsTarHeader(b) && !isZeroBlock(b) {
			t.Fatalf("Probe says tar for a non-tar first block")
		}
	})
}

// FuzzCompressionRoundTrip compresses any bytes with each codec the project
// writes and checks that Decompress gives them back and Sniff names the codec.
func FuzzCompressionRoundTrip(f *testing.F) {
	tarb := tarBytes(f, []entry{{name: "etc/os-release", data: []byte("ID=test\n")}})
	seeds := map[string][]any{}
	for i, c := range fuzzCompressions {
		seeds[string(c)+"-tar"] = []any{tarb, uint8(i)}
		seeds[string(c)+"-text"] = []any{[]byte("line 1\r\nline 2\n"), uint8(i)}
	}
	testenv.Seeds(f, seeds)

	f.Fuzz(func(t *testing.T, plain []byte, which uint8) {
		c := fuzzCompressions[int(which)%len(fuzzCompressions)]
		if c == None {
			if s := Sniff(plain); s != None {
				return // plain bytes that begin with a magic number are that codec's to judge
			}
		}
		z := fuzzCompress(t, c, plain)
		if got := Sniff(z); got != c {
			t.Fatalf("Sniff of %s output: %s", c, got)
		}
		rc, got, err := decompress(bytes.NewReader(z), 1<<20)
		if err != nil || got != c {
			t.Fatalf("Decompress of %s output: %s, %v", c, got, err)
		}
		defer rc.Close()
		out, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("reading %s output: %v", c, err)
		}
		if !bytes.Equal(out, plain) {
			t.Fatalf("%s round trip: %d bytes in, %d out", c, len(plain), len(out))
		}
	})
}

// resolveTokens are placeholders FuzzResolve replaces in its documents, so
// that mutated JSON still refers to the blobs of the archive by digest.
func resolveTokens(docs map[string]blob) *strings.Replacer {
	var kv []string
	for k, b := range docs {
		kv = append(kv, "@"+k+"@", b.digest().String(), "@"+k+"size@", strconv.Itoa(len(b.data)))
	}
	return strings.NewReplacer(kv...)
}

// FuzzResolve mutates the documents of an archive (index.json, a manifest, a
// config, manifest.json), not its tar framing, to exercise index and manifest
// resolution. Placeholders @C@, @L@, @M@ (and @Csize@...) stand for the
// config, the layer and the manifest. The archive goes through Walk as an OCI
// (or hybrid, with manifest.json) tar and as a layout directory; both must
// agree, and what they report must hold together: every image's target is a
// document of the archive with the size named, every child of a reported
// document that the archive holds has the size the parent gives it.
func FuzzResolve(f *testing.F) {
	im := makeImage(f, "amd64", None, "bin/sh")
	layer := im.layers[0]
	cfg := string(im.config.data)
	manifest := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"@C@","size":@Csize@},` +
		`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"@L@","size":@Lsize@}]}`
	named := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` +
		`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"@M@","size":@Msize@,` +
		`"annotations":{"io.containerd.image.name":"docker.io/library/a:1","org.opencontainers.image.ref.name":"1"}}]}`
	nested := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"@I@","size":@Isize@,` +
		`"annotations":{"org.opencontainers.image.ref.name":"example.com/m:1"}}]}`
	inner := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` +
		`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"@M@","size":@Msize@,"platform":{"os":"linux","architecture":"amd64"}}]}`
	bare := strings.Replace(named, `"io.containerd.image.name":"docker.io/library/a:1",`, "", 1)
	hybridMJ := `[{"Config":"blobs/sha256/@Chex@","RepoTags":["b:1"],"Layers":["blobs/sha256/@Lhex@"]}]`
	testenv.Seeds(f, map[string][]any{
		"oci":        {[]byte(named), []byte(manifest), []byte(cfg), []byte(""), []byte("")},
		"nested":     {[]byte(nested), []byte(manifest), []byte(cfg), []byte(inner), []byte("")},
		"bare-tag":   {[]byte(bare), []byte(manifest), []byte(cfg), []byte(""), []byte("")},
		"hybrid":     {[]byte(bare), []byte(manifest), []byte(cfg), []byte(""), []byte(hybridMJ)},
		"bad-config": {[]byte(named), []byte(manifest), []byte("{}"), []byte(""), []byte("")},
		"docker":     {[]byte(""), []byte(""), []byte(cfg), []byte(""), []byte(`[{"Config":"blobs/sha256/@Chex@","RepoTags":["c:2"],"Layers":["blobs/sha256/@Lhex@"]}]`)},
	})

	f.Fuzz(func(t *testing.T, index, manifest, config, inner, manifestJSON []byte) {
		if len(index)+len(manifest)+len(config)+len(inner)+len(manifestJSON) > 64<<10 {
			return
		}
		// Documents refer to each other through the placeholders, in order:
		// the config and layer first, then the manifest, the inner index, the index.
		c := blob{data: config}
		docs := map[string]blob{"C": c, "L": layer}
		hexes := strings.NewReplacer("@Chex@", c.digest().Encoded(), "@Lhex@", layer.digest().Encoded())
		m := blob{data: []byte(resolveTokens(docs).Replace(string(manifest)))}
		docs["M"] = m
		in := blob{data: []byte(resolveTokens(docs).Replace(string(inner)))}
		docs["I"] = in
		idx := []byte(resolveTokens(docs).Replace(string(index)))
		mj := []byte(hexes.Replace(string(manifestJSON)))

		blobs := []blob{c, layer, m}
		if len(inner) > 0 {
			blobs = append(blobs, in)
		}
		var es []entry
		if len(index) > 0 {
			es = ociEntries("", idx, blobs...)
		} else {
			for _, b := range blobs {
				es = append(es, entry{name: "blobs/sha256/" + b.digest().Encoded(), data: b.data})
			}
		}
		if len(manifestJSON) > 0 {
			es = append(es, entry{name: "manifest.json", data: mj})
		}
		lim := defaultLimits()
		lim.zstdWindow = 1 << 20
		st := newMemStore()
		res, err := walk(t.Context(), bytes.NewReader(tarBytes(t, es)), st, WalkOptions{Concurrency: 1}, lim)

		if len(index) > 0 {
			dir := t.TempDir()
			writeLayout(t, dir, idx, blobs...)
			if len(manifestJSON) > 0 {
				if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mj, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dres, derr := walkDir(t.Context(), dir, newMemStore(), WalkOptions{Concurrency: 1}, lim)
			if (err == nil) != (derr == nil) {
				t.Fatalf("tar: %v; dir: %v", err, derr)
			}
			if err == nil {
				j1, _ := json.Marshal(res.Images)
				j2, _ := json.Marshal(dres.Images)
				if !bytes.Equal(j1, j2) {
					t.Fatalf("tar and dir differ: %s; %s", j1, j2)
				}
			}
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		checkFuzzResult(t, res, st)
	})
}

// checkFuzzResult asserts what any successful walk must hold: names are full
// references, targets are documents of the archive of the size given, every
// child a reported document names that the archive holds has the size given,
// and every blob reported was written to (or found in) the store.
func checkFuzzResult(t *testing.T, res *Result, st *memStore) {
	t.Helper()
	if len(res.Images) == 0 {
		t.Fatal("success without images")
	}
	for _, im := range res.Images {
		if _, err := reference.ParseNormalizedNamed(im.Name); err != nil {
			t.Errorf("image name %q: %v", im.Name, err)
		}
		doc, ok := res.Docs[im.Target.Digest]
		if !ok {
			t.Fatalf("%s: target %s is not a document of the archive", im.Name, im.Target.Digest)
		}
		if int64(len(doc)) != im.Target.Size {
			t.Errorf("%s: target %s of size %d, the document has %d bytes", im.Name, im.Target.Digest, im.Target.Size, len(doc))
		}
		checkChildren(t, res, im.Target.Digest, map[digest.Digest]bool{})
	}
	for d, doc := range res.Docs {
		if d.Algorithm().FromBytes(doc) != d {
			t.Errorf("Docs[%s] has other bytes", d)
		}
	}
	for d, size := range res.Blobs {
		b, ok := st.blobs[d]
		if !ok && !st.present[d] {
			t.Errorf("blob %s reported but not in the store", d)
		}
		if ok && int64(len(b)) != size {
			t.Errorf("blob %s reported with size %d, stored %d", d, size, len(b))
		}
	}
}

func checkChildren(t *testing.T, res *Result, d digest.Digest, seen map[digest.Digest]bool) {
	if seen[d] {
		return
	}
	seen[d] = true
	var refs struct {
		Manifests []ocispec.Descriptor `json:"manifests"`
		Config    *ocispec.Descriptor  `json:"config"`
		Layers    []ocispec.Descriptor `json:"layers"`
	}
	if json.Unmarshal(res.Docs[d], &refs) != nil {
		return
	}
	kids := append(refs.Manifests, refs.Layers...)
	if refs.Config != nil {
		kids = append(kids, *refs.Config)
	}
	for _, k := range kids {
		if doc, ok := res.Docs[k.Digest]; ok {
			if int64(len(doc)) != k.Size && isKnownType(k.MediaType) {
				t.Errorf("%s names %s with size %d, the archive's has %d bytes", d, k.Digest, k.Size, len(doc))
			}
			checkChildren(t, res, k.Digest, seen)
		}
	}
}

func isKnownType(mt string) bool {
	return oci.IsIndex(mt) || oci.IsManifest(mt) || oci.IsImageConfig(mt)
}

// FuzzWalkDir walks an OCI layout directory whose index.json, oci-layout
// and blob names come from the fuzzer, with symlinks in it that point out of
// the directory. Whatever it holds, the walk must never read outside the
// directory: the secret file beside it, which the index names by digest, must
// never reach the store or the documents.
func FuzzWalkDir(f *testing.F) {
	im := makeImage(f, "amd64", None, "bin/sh")
	secret := []byte("root:$6$secret-outside-the-layout:19000:0:99999:7:::\n")
	sd := digest.FromBytes(secret)
	idx := indexJSON(f, withAnnotations(im.manifest.desc(), annotationContainerdName, "docker.io/library/a:1"))
	leak := indexJSON(f, withAnnotations(ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: sd, Size: int64(len(secret))}, annotationContainerdName, "docker.io/library/s:1"))
	testenv.Seeds(f, map[string][]any{
		"plain":        {idx, uint8(0)},
		"blob-link":    {leak, uint8(1)},
		"blobs-link":   {leak, uint8(2)},
		"index-link":   {leak, uint8(3)},
		"sha256-link":  {leak, uint8(4)},
		"relative-out": {leak, uint8(5)},
	})

	f.Fuzz(func(t *testing.T, index []byte, how uint8) {
		root := t.TempDir()
		outside := filepath.Join(root, "outside")
		dir := filepath.Join(root, "layout")
		for _, d := range []string{filepath.Join(outside, "blobs", "sha256"), filepath.Join(dir, "blobs", "sha256")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write := func(p string, b []byte) {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// The secret, as a blob and as an index, outside the layout.
		write(filepath.Join(outside, "blobs", "sha256", sd.Encoded()), secret)
		write(filepath.Join(outside, "index.json"), idx) // valid: read through a link, the walk would succeed
		write(filepath.Join(outside, "secret"), secret)
		write(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`))
		for _, b := range im.blobs() {
			write(filepath.Join(dir, "blobs", "sha256", b.digest().Encoded()), b.data)
		}
		write(filepath.Join(dir, "index.json"), index)
		link := func(target, name string) {
			_ = os.RemoveAll(name)
			if err := os.Symlink(target, name); err != nil {
				t.Fatal(err)
			}
		}
		switch how % 6 {
		case 1:
			link(filepath.Join(outside, "secret"), filepath.Join(dir, "blobs", "sha256", sd.Encoded()))
		case 2:
			link(filepath.Join(outside, "blobs"), filepath.Join(dir, "blobs"))
		case 3:
			link(filepath.Join(outside, "index.json"), filepath.Join(dir, "index.json"))
		case 4:
			link(filepath.Join(outside, "blobs", "sha256"), filepath.Join(dir, "blobs", "sha256"))
		case 5:
			link("../../../outside/secret", filepath.Join(dir, "blobs", "sha256", sd.Encoded()))
		}
		st := newMemStore()
		lim := defaultLimits()
		res, err := walkDir(t.Context(), dir, st, WalkOptions{Concurrency: 2}, lim)
		if _, ok := st.blobs[sd]; ok {
			t.Fatalf("the walk read %s, outside the layout dir", filepath.Join(outside, "secret"))
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if _, ok := res.Docs[sd]; ok {
			t.Fatalf("the walk read the secret outside the layout dir into its documents")
		}
		if how%6 == 3 {
			t.Fatalf("the walk read index.json through a symlink out of the layout dir")
		}
		checkFuzzResult(t, res, st)
	})
}

// fuzzCompress is compress with small windows, one goroutine and the fastest
// levels: the default writers allocate tens of MiB each (xz's 8 MiB
// dictionary, zstd's per-CPU encoders), which would make a fuzz run crawl.
func fuzzCompress(t testing.TB, c Compression, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch c {
	case None:
		return b
	case Gzip:
		w, err = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	case Zstd:
		w, err = zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<16),
			zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true))
	case Xz:
		w, err = xz.WriterConfig{DictCap: 1 << 16}.NewWriter(&buf)
	case Lz4:
		lw := lz4.NewWriter(&buf)
		err = lw.Apply(lz4.ConcurrencyOption(1), lz4.BlockSizeOption(lz4.Block64Kb))
		w = lw
	case Bzip2:
		w, err = bzip2.NewWriter(&buf, &bzip2.WriterConfig{Level: 1})
	default:
		t.Fatalf("compress: %s", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
