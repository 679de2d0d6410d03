package zstdframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// fuzzReadCap bounds what the fuzz target reads of a decompressed stream: a
// small input may expand a thousandfold, and the target must stay fast.
const fuzzReadCap = 4 << 20

// FuzzZstdFrames feeds the frame scanner hostile bytes and compares what it
// decodes with klauspost's single streaming reader: the two agree on every
// byte both produce; a stream the scanner decodes whole, the single reader
// decodes whole too; the scanner refuses a stream the single reader takes
// only for a marker that lies (a pzstd size frame, a seek table). Errors
// name zstd and stay.
func FuzzZstdFrames(f *testing.F) {
	const window = 1 << 20
	text := []byte(strings.Repeat("a layer, a manifest, an index. ", 200))
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<16),
		zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true))
	if err != nil {
		f.Fatal(err)
	}
	var fs []fixture.ZstdFrame
	for i := 0; i < len(text); i += 1500 {
		c := text[i:min(len(text), i+1500)]
		fs = append(fs, fixture.ZstdFrame{Content: c, Comp: enc.EncodeAll(c, nil)})
	}
	plain := fixture.ConcatZstd(fs)
	seekable := append(fixture.ConcatZstd(fs), fixture.SeekTableOf(fs)...)
	lying := bytes.Clone(seekable)
	binary.LittleEndian.PutUint32(lying[len(plain)+8+entrySizeXXH:], 7)
	testenv.Seeds(f, map[string][]any{
		"one-frame":  {fs[0].Comp, uint8(0)},
		"frames":     {plain, uint8(1)},
		"pzstd":      {fixture.PzstdFrames(fs), uint8(2)},
		"seekable":   {seekable, uint8(1)},
		"lying":      {lying, uint8(0)},
		"empty":      {emptyFrame, uint8(1)},
		"skippable":  {append(fixture.SkippableFrame(0x184D2A51, []byte("x")), fs[1].Comp...), uint8(2)},
		"truncated":  {plain[:len(plain)-5], uint8(1)},
		"rle-blocks": {fixture.HostileZstdFrame(3*maxBlock, 3), uint8(0)},
	})

	f.Fuzz(func(t *testing.T, b []byte, workers uint8) {
		z := NewReader(bytes.NewReader(b), window, 1+int(workers%3))
		got, err := io.ReadAll(io.LimitReader(z, fuzzReadCap))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "zstd: ") {
				t.Fatalf("error %q does not name zstd", err)
			}
			if _, again := z.Read(make([]byte, 16)); again == nil {
				t.Fatalf("error %v not sticky", err)
			}
		}
		z.Close()

		zr, rerr := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(window), zstd.WithDecoderLowmem(true))
		if rerr != nil {
			t.Fatal(rerr)
		}
		defer zr.Close()
		want, rerr := io.ReadAll(io.LimitReader(zr, fuzzReadCap))
		m := min(len(got), len(want))
		if !bytes.Equal(got[:m], want[:m]) {
			t.Fatalf("the frames decode to other bytes than the single reader's, within the first %d", m)
		}
		capped := len(got) == fuzzReadCap || len(want) == fuzzReadCap
		if err == nil && !capped && (rerr != nil || len(got) != len(want)) {
			t.Fatalf("decoded whole (%d bytes), the single reader says %d bytes, %v", len(got), len(want), rerr)
		}
		var fe *Error
		marker := errors.As(err, &fe) && (strings.Contains(err.Error(), "seek table") || strings.Contains(err.Error(), "pzstd"))
		if err != nil && rerr == nil && !capped && !marker {
			t.Fatalf("refused (%v) what the single reader decodes (%d bytes)", err, len(want))
		}
	})
}
