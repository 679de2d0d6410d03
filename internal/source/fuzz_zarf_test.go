package source

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzZarfMeta: any part000 is read without a panic, and one that is taken
// gives a sha256 of 64 lower-case hex digits and a count of at least one
// part of a size no less than zero.
func FuzzZarfMeta(f *testing.F) {
	f.Add([]byte(`{"sha256sum":"` + strings.Repeat("ab", 32) + `","bytes":1048576,"count":3}`))
	f.Add([]byte(`{"Sha256Sum":"` + strings.Repeat("AB", 32) + `","Bytes":0,"Count":1}`))
	f.Add([]byte(`{"sha256sum":"xyz","bytes":-1,"count":0}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "pkg.tar.zst.part000")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := readZarfMeta(path)
		if err != nil {
			if !strings.Contains(err.Error(), "part000") {
				t.Errorf("an error that does not name the file: %v", err)
			}
			return
		}
		if _, herr := hex.DecodeString(m.Sha256Sum); herr != nil || len(m.Sha256Sum) != 64 || strings.ToLower(m.Sha256Sum) != m.Sha256Sum {
			t.Errorf("a part list taken with sha256 %q", m.Sha256Sum)
		}
		if m.Count < 1 || m.Bytes < 0 {
			t.Errorf("a part list taken with %d parts of %d bytes", m.Count, m.Bytes)
		}
	})
}
