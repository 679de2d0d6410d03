package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// Shape is a group of archives of one kind: Count archives, each holding one
// image of Layers layers of LayerSize content bytes. Even-numbered layers are
// compressible text, odd-numbered ones random bytes, so every archive has
// both. Formats are used round-robin over the archives.
type Shape struct {
	Count     int              `json:"count"`
	Layers    int              `json:"layers"`
	LayerSize int64            `json:"layer_size"`
	Formats   []fixture.Format `json:"formats"`
}

// ContentBytes is the layer content of one archive of the shape.
func (s Shape) ContentBytes() int64 { return int64(s.Layers) * s.LayerSize }

// Set is every archive the harness generates.
type Set struct {
	Name   string `json:"name"`
	Large  Shape  `json:"large"`  // P1, P5, P6: one archive, also written as .tar.zst
	Small  Shape  `json:"small"`  // P1s: one archive of many small layers (per-blob fsync)
	Medium Shape  `json:"medium"` // P2: imported together
	Warm   Shape  `json:"warm"`   // P3: imported once, then synced warm
	// Heal is one archive holding Count images (P4: each is deleted once,
	// so no name reaches the agent's heal backoff of 3 heals a minute).
	Heal  Shape `json:"heal"`
	Watch Shape `json:"watch"` // P4: Count archives renamed into the images dir one by one
	// Huge is P5's one archive, generated when P5 runs and deleted after.
	Huge Shape `json:"huge"`
	// Bundle is P7's images, written as a Hauler haul and as an OCI
	// .tar.zst of the same images, generated when P7 runs and deleted after.
	Bundle Shape `json:"bundle"`
	// DiskBytes is what the disk rate writes each time (1 stream: one
	// file; 4 streams: 4 files of a quarter each).
	DiskBytes int64 `json:"disk_bytes"`
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// FullSet is the default set: 1 archive of 1 GiB, 4 of 256 MiB, 20 of
// 100 MiB, one of 300 small layers; 50 heals and 5 renamed-in archives; one
// of 4 GiB (P5); 512 MiB for the disk rate.
func FullSet() Set {
	return Set{
		Name:   "full",
		Large:  Shape{Count: 1, Layers: 8, LayerSize: 128 * mib, Formats: []fixture.Format{fixture.FormatHybrid}},
		Small:  Shape{Count: 1, Layers: 300, LayerSize: 64 * kib, Formats: []fixture.Format{fixture.FormatOCI}},
		Medium: Shape{Count: 4, Layers: 4, LayerSize: 64 * mib, Formats: []fixture.Format{fixture.FormatDockerSave, fixture.FormatHybrid, fixture.FormatOCI}},
		Warm:   Shape{Count: 20, Layers: 5, LayerSize: 20 * mib, Formats: []fixture.Format{fixture.FormatHybrid, fixture.FormatOCI}},
		Heal:   Shape{Count: 50, Layers: 1, LayerSize: 256 * kib, Formats: []fixture.Format{fixture.FormatOCI}},
		Watch:  Shape{Count: 5, Layers: 2, LayerSize: 4 * mib, Formats: []fixture.Format{fixture.FormatOCI}},
		Huge:   Shape{Count: 1, Layers: 32, LayerSize: 128 * mib, Formats: []fixture.Format{fixture.FormatHybrid}},
		Bundle: Shape{Count: 2, Layers: 8, LayerSize: 128 * mib, Formats: []fixture.Format{fixture.FormatOCI}},
		// DiskBytes: as much as P1's archive holds, about.
		DiskBytes: 512 * mib,
	}
}

// QuickSet has the shapes of FullSet with tiny archives and few samples: a
// smoke test of the harness, not a measurement.
func QuickSet() Set {
	return Set{
		Name:      "quick",
		Large:     Shape{Count: 1, Layers: 4, LayerSize: 2 * mib, Formats: []fixture.Format{fixture.FormatHybrid}},
		Small:     Shape{Count: 1, Layers: 30, LayerSize: 16 * kib, Formats: []fixture.Format{fixture.FormatOCI}},
		Medium:    Shape{Count: 4, Layers: 2, LayerSize: 1 * mib, Formats: []fixture.Format{fixture.FormatDockerSave, fixture.FormatHybrid, fixture.FormatOCI}},
		Warm:      Shape{Count: 20, Layers: 1, LayerSize: 256 * kib, Formats: []fixture.Format{fixture.FormatHybrid, fixture.FormatOCI}},
		Heal:      Shape{Count: 10, Layers: 1, LayerSize: 64 * kib, Formats: []fixture.Format{fixture.FormatOCI}},
		Watch:     Shape{Count: 3, Layers: 1, LayerSize: 256 * kib, Formats: []fixture.Format{fixture.FormatOCI}},
		Huge:      Shape{Count: 1, Layers: 8, LayerSize: 1 * mib, Formats: []fixture.Format{fixture.FormatHybrid}},
		Bundle:    Shape{Count: 2, Layers: 2, LayerSize: 1 * mib, Formats: []fixture.Format{fixture.FormatOCI}},
		DiskBytes: 16 * mib,
	}
}

// Archive is one generated archive file.
type Archive struct {
	Path        string              `json:"path"`
	Format      fixture.Format      `json:"format"`
	Compression fixture.Compression `json:"compression"`
	ZstdWindow  int                 `json:"zstd_window,omitempty"`
	Bytes       int64               `json:"bytes"` // on disk
	Names       []string            `json:"names"`
}

// Archives are the generated archives. Each group is alone in its own
// directory (an images dir for holdfast).
type Archives struct {
	Dir      string    `json:"dir"`
	Large    Archive   `json:"large"`
	LargeZst Archive   `json:"large_zst"`
	Small    Archive   `json:"small"`
	Medium   []Archive `json:"medium"`
	Warm     []Archive `json:"warm"`
	Heal     Archive   `json:"heal"`
	Watch    []Archive `json:"watch"`
}

// GroupDir is the directory of the archives of one group.
func (a *Archives) GroupDir(group string) string { return filepath.Join(a.Dir, group) }

// All lists every archive.
func (a *Archives) All() []Archive {
	all := []Archive{a.Large, a.LargeZst, a.Small}
	all = append(all, a.Medium...)
	all = append(all, a.Warm...)
	all = append(all, a.Heal)
	return append(all, a.Watch...)
}

// Names lists the image names of archives.
func Names(archives ...Archive) []string {
	var names []string
	for _, a := range archives {
		names = append(names, a.Names...)
	}
	return names
}

// Generate writes the archives of set under dir. zstdWindow is the window the
// .tar.zst declares (a power of two). progress, if not nil, is told about each
// archive as it is written.
func Generate(ctx context.Context, dir string, set Set, zstdWindow int, progress func(Archive)) (*Archives, error) {
	a := &Archives{Dir: dir}
	note := func(x Archive) {
		if progress != nil {
			progress(x)
		}
	}
	group := func(name string, s Shape, perArchive int, c fixture.Compression) ([]Archive, error) {
		var out []Archive
		for i := range max(s.Count/perArchive, 1) {
			x, err := generateOne(ctx, a.GroupDir(name), name, i, s, perArchive, c, zstdWindow)
			if err != nil {
				return nil, err
			}
			note(x)
			out = append(out, x)
		}
		return out, nil
	}
	var err error
	var one []Archive
	if one, err = group("large", set.Large, 1, fixture.None); err != nil {
		return nil, err
	}
	a.Large = one[0]
	x, err := generateOne(ctx, a.GroupDir("large-zst"), "large", 0, set.Large, 1, fixture.Zstd, zstdWindow)
	if err != nil {
		return nil, err
	}
	note(x)
	a.LargeZst = x
	if one, err = group("small", set.Small, 1, fixture.None); err != nil {
		return nil, err
	}
	a.Small = one[0]
	if a.Medium, err = group("medium", set.Medium, 1, fixture.None); err != nil {
		return nil, err
	}
	if a.Warm, err = group("warm", set.Warm, 1, fixture.None); err != nil {
		return nil, err
	}
	if one, err = group("heal", set.Heal, set.Heal.Count, fixture.None); err != nil {
		return nil, err
	}
	a.Heal = one[0]
	if a.Watch, err = group("watch", set.Watch, 1, fixture.None); err != nil {
		return nil, err
	}
	return a, nil
}

// GenerateHuge writes P5's archive (set.Huge) under dir, in a directory of
// its own (an images dir).
func GenerateHuge(ctx context.Context, dir string, set Set) (Archive, error) {
	return generateOne(ctx, dir, "huge", 0, set.Huge, 1, fixture.None, 0)
}

// generateOne writes archive i of a group, holding images images of shape s.
func generateOne(ctx context.Context, dir, group string, i int, s Shape, images int, c fixture.Compression, zstdWindow int) (Archive, error) {
	format := s.Formats[i%len(s.Formats)]
	x := Archive{
		Path:        filepath.Join(dir, fmt.Sprintf("%s-%02d.tar%s", group, i, c.Extension())),
		Format:      format,
		Compression: c,
	}
	if c == fixture.Zstd {
		x.ZstdWindow = zstdWindow
	}
	var imgs []*fixture.Image
	for j := range images {
		name := fmt.Sprintf("bench.example/%s/img-%02d:1", group, i*images+j)
		layers := fixture.UniformLayers(s.Layers, s.LayerSize, false, seedOf(group, i*images+j))
		for k := range layers {
			layers[k].Compressible = k%2 == 0
		}
		img, err := fixture.Build(ctx, fixture.ImageSpec{Names: []string{name}, Layers: layers})
		if err != nil {
			return x, fmt.Errorf("generating %s: %w", x.Path, err)
		}
		imgs = append(imgs, img)
		x.Names = append(x.Names, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return x, fmt.Errorf("generating %s: %w", x.Path, err)
	}
	err := fixture.WriteFileAtomic(x.Path, func(w io.Writer) error {
		cw, err := fixture.Compress(w, c, fixture.CompressOptions{ZstdWindow: x.ZstdWindow})
		if err != nil {
			return err
		}
		switch format {
		case fixture.FormatDockerSave:
			err = fixture.WriteDockerSave(ctx, cw, imgs...)
		case fixture.FormatHybrid:
			err = fixture.WriteHybrid(ctx, cw, imgs...)
		case fixture.FormatOCI:
			err = fixture.WriteOCI(ctx, cw, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, imgs...)
		case fixture.FormatHaul:
			err = fixture.WriteHaul(ctx, cw, fixture.HaulOptions{}, imgs...)
		default:
			err = fmt.Errorf("format %s is not one the harness writes", format)
		}
		if err != nil {
			return err
		}
		return cw.Close()
	})
	if err != nil {
		return x, fmt.Errorf("generating %s: %w", x.Path, err)
	}
	fi, err := os.Stat(x.Path)
	if err != nil {
		return x, fmt.Errorf("generating %s: %w", x.Path, err)
	}
	x.Bytes = fi.Size()
	return x, nil
}

// seedOf is a seed per group and image, so no two groups share a layer.
func seedOf(group string, i int) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", group, i)
	return int64(h.Sum64() >> 1)
}
