package report

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// heldSeeds are held lists as GET /held serves them, and lines that are not.
func heldSeeds() [][]byte {
	return [][]byte{
		heldOf(3).Text(),
		nil,
		[]byte("sha256:abc p a:1\nsha256:abc x b:1\n"),
		[]byte("sha256:abc p a:1\nmd5:abc p b:1\n"),
		[]byte("sha256:abc p a:1\nsha256:abc p\n"),
		[]byte("sha256:abc - a b c\r\n\nsha256:def p d@sha256:def\n"),
	}
}

// badLine is how ParseHeld names the line it refuses.
var badLine = regexp.MustCompile(`^held images, line [1-9][0-9]*: `)

// FuzzParseHeld: what the agent's GET /held answers is read by the
// reporter; whatever it is, ParseHeld does not panic, a list it reads
// comes back the same through its text, and a refusal names the line.
func FuzzParseHeld(f *testing.F) {
	for _, s := range heldSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		h, err := ParseHeld(text)
		if err != nil {
			if !badLine.MatchString(err.Error()) && !strings.HasPrefix(err.Error(), "held images: ") {
				t.Fatalf("error %q names no line", err)
			}
			return
		}
		again, err := ParseHeld(h.Text())
		if err != nil || !slices.Equal(again, h) {
			t.Fatalf("ParseHeld(Text) of %+v: %v, %+v", h, err, again)
		}
	})
}

// FuzzUnpack: a NodeImages object's held list is read by check --cluster
// from the API server; whatever its bytes, Unpack does not panic, and a
// list it reads packs and unpacks to itself.
func FuzzUnpack(f *testing.F) {
	for _, s := range heldSeeds() {
		h, err := ParseHeld(s)
		if err == nil {
			f.Add(h.Pack())
		}
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, packed []byte) {
		h, err := Unpack(packed)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "held images") {
				t.Fatalf("error %q does not say what it read", err)
			}
			return
		}
		again, err := Unpack(h.Pack())
		if err != nil || !slices.Equal(again, h) {
			t.Fatalf("Unpack(Pack) of %+v: %v, %+v", h, err, again)
		}
	})
}
