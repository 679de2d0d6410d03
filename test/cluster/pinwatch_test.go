package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
)

// pinWatch records every moment a wanted image record lacked the CRI pin label, from containerd's
// /images/ events (each update carries the record's labels) and from polling the records every 20 ms.
type pinWatch struct {
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	mu         sync.Mutex
	violations []string
	events     int
	probed     []string // names whose update carried the probe label
}

func (w *pinWatch) sawProbe(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.probed, name)
}

func watchPins(ctx context.Context, t *testing.T, cli *containerd.Client, wanted []string) *pinWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(namespaces.WithNamespace(ctx, criNamespace))
	w := &pinWatch{cancel: cancel}
	msgs, errs := cli.EventService().Subscribe(ctx, `topic~="^/images/"`)
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				if err != nil && ctx.Err() == nil {
					w.add("containerd event stream: %v", err)
				}
				return
			case env := <-msgs:
				if env == nil || env.Namespace != criNamespace {
					continue
				}
				w.mu.Lock()
				w.events++
				w.mu.Unlock()
				ev, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					w.add("decoding event %s: %v", env.Topic, err)
					continue
				}
				switch e := ev.(type) {
				case *eventtypes.ImageUpdate:
					if e.Labels["holdfast.test/probe"] != "" {
						w.mu.Lock()
						w.probed = append(w.probed, e.Name)
						w.mu.Unlock()
					}
					if slices.Contains(wanted, e.Name) && e.Labels[criPinLabel] != "pinned" {
						w.add("%s: image update of %s without %s (labels %v)", env.Timestamp.Format(time.RFC3339Nano), e.Name, criPinLabel, e.Labels)
					}
				case *eventtypes.ImageDelete:
					if slices.Contains(wanted, e.Name) {
						w.add("%s: %s deleted", env.Timestamp.Format(time.RFC3339Nano), e.Name)
					}
				}
			}
		}
	}()
	go func() {
		defer w.wg.Done()
		is := cli.ImageService()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, ref := range wanted {
				img, err := is.Get(ctx, ref)
				if ctx.Err() != nil {
					return
				}
				switch {
				case errdefs.IsNotFound(err):
					w.add("%s: %s has no record", time.Now().Format(time.RFC3339Nano), ref)
				case err != nil:
					w.add("reading %s: %v", ref, err)
				case img.Labels[criPinLabel] != "pinned":
					w.add("%s: %s lacks %s (labels %v)", time.Now().Format(time.RFC3339Nano), ref, criPinLabel, img.Labels)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *pinWatch) add(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) < 20 {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
}

// stop ends the watch and returns what it saw.
func (w *pinWatch) stop() (violations []string, events int) {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.violations, w.events
}
