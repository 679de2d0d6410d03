package cli

import (
	"github.com/holdfast-project/holdfast/internal/runtime"
	hfcontainerd "github.com/holdfast-project/holdfast/internal/runtime/containerd"
)

// minFreeValue is the --min-free flag: a size or a percentage.
type minFreeValue struct{ v runtime.MinFree }

// String is empty for the default, which the flag's help describes.
func (m *minFreeValue) String() string {
	if !m.v.Set {
		return ""
	}
	return m.v.String()
}
func (m *minFreeValue) Type() string { return "size|percent" }
func (m *minFreeValue) Set(s string) error {
	v, err := runtime.ParseMinFree(s)
	if err != nil {
		return err
	}
	m.v = v
	return nil
}

// spaceOptions is how imports check the content store's free space.
func (o *options) spaceOptions() hfcontainerd.SpaceOptions {
	return hfcontainerd.SpaceOptions{ContentRoot: o.contentRoot, MinFree: o.minFree.v, Log: o.log}
}

// writePathValue is the --write-path flag.
type writePathValue struct{ v hfcontainerd.WritePath }

func (w *writePathValue) String() string {
	if w.v == "" {
		return string(hfcontainerd.WriteAuto)
	}
	return string(w.v)
}

func (w *writePathValue) Type() string { return "auto|direct|stream" }
func (w *writePathValue) Set(s string) error {
	v, err := hfcontainerd.ParseWritePath(s)
	if err != nil {
		return err
	}
	w.v = v
	return nil
}

// writeOptions is how imports write blobs.
func (o *options) writeOptions() hfcontainerd.WriteOptions {
	path := o.writePath.v
	if path == "" {
		path = hfcontainerd.WriteAuto
	}
	return hfcontainerd.WriteOptions{Path: path, ContentRoot: o.contentRoot, Log: o.log}
}
