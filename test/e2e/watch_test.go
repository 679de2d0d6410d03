package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/typeurl/v2"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageEvent is one /images/ event a watcher saw.
type imageEvent struct {
	Kind   string // create, update, delete
	Name   string
	Labels map[string]string
}

func (e imageEvent) pinned() bool {
	return e.Labels["io.cri-containerd.pinned"] == "pinned" && e.Labels["io.holdfast.pinned"] == "pinned"
}

// imageWatch records every /images/ event of the k8s.io namespace.
type imageWatch struct {
	d        *daemon
	mu       sync.Mutex
	events   []imageEvent
	sentinel chan string
	target   ocispec.Descriptor
	n        int
}

// watchImages subscribes to d's image events until the test ends. target is
// any descriptor: sentinel records point at it.
func watchImages(t *testing.T, d *daemon, target ocispec.Descriptor) *imageWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &imageWatch{d: d, sentinel: make(chan string, 16), target: target}
	evs, errs := d.Client.Subscribe(ctx, `namespace=="k8s.io",topic~="^/images/"`)
	go func() {
		for {
			select {
			case e := <-evs:
				v, err := typeurl.UnmarshalAny(e.Event)
				if err != nil {
					continue
				}
				var ev imageEvent
				switch x := v.(type) {
				case *eventtypes.ImageCreate:
					ev = imageEvent{"create", x.Name, x.Labels}
				case *eventtypes.ImageUpdate:
					ev = imageEvent{"update", x.Name, x.Labels}
				case *eventtypes.ImageDelete:
					ev = imageEvent{"delete", x.Name, nil}
				default:
					continue
				}
				if strings.HasPrefix(ev.Name, "e2e.local/sentinel") {
					if ev.Kind == "create" {
						w.sentinel <- ev.Name
					}
					continue
				}
				w.mu.Lock()
				w.events = append(w.events, ev)
				w.mu.Unlock()
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	// containerd's Subscribe goes live some time after it returns: create
	// sentinels until one is seen.
	for i := 0; ; i++ {
		name := w.createSentinel(t)
		select {
		case got := <-w.sentinel:
			if got == name {
				w.mu.Lock()
				w.events = nil
				w.mu.Unlock()
				return w
			}
		case <-time.After(500 * time.Millisecond):
			if i > 60 {
				t.Fatal("the event subscription never went live")
			}
		}
	}
}

func (w *imageWatch) createSentinel(t *testing.T) string {
	t.Helper()
	w.n++
	name := fmt.Sprintf("e2e.local/sentinel:%d", w.n)
	if _, err := w.d.Client.ImageService().Create(w.d.ctx(), images.Image{Name: name, Target: w.target}); err != nil {
		t.Fatal(err)
	}
	return name
}

// flush waits until every event before it has been seen, and returns them, clearing the log.
func (w *imageWatch) flush(t *testing.T) []imageEvent {
	t.Helper()
	name := w.createSentinel(t)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-w.sentinel:
			if got != name {
				continue
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			out := w.events
			w.events = nil
			return out
		case <-deadline:
			t.Fatal("sentinel event never arrived")
		}
	}
}

// pinChanges lists the names whose pinned state (exists and carries both pin
// labels) the events changed, ignoring the CRI's own sha256: records.
func pinChanges(before map[string]bool, evs []imageEvent) map[string]bool {
	state := map[string]bool{}
	for k, v := range before {
		state[k] = v
	}
	changed := map[string]bool{}
	for _, e := range evs {
		if strings.HasPrefix(e.Name, "sha256:") {
			continue
		}
		now := e.Kind != "delete" && e.pinned()
		if was, ok := state[e.Name]; !ok || was != now {
			changed[e.Name] = true
		}
		state[e.Name] = now
	}
	for k := range changed {
		if before[k] == state[k] {
			delete(changed, k) // changed and changed back
		}
	}
	return changed
}
