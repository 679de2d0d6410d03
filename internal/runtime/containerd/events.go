package containerd

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	eventtypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// WatchImages streams the namespace's image events. containerd's Subscribe
// has no acknowledgement: the stream goes live a few milliseconds after this
// returns, so a change in that window is only seen by the caller's next full
// pass. The error channel gets one error when the stream breaks (containerd
// restarted, connection lost); both channels are then done.
func (r *Runtime) WatchImages(ctx context.Context) (<-chan runtime.ImageEvent, <-chan error) {
	filter := fmt.Sprintf(`namespace==%s,topic~="^/images/"`, strconv.Quote(r.namespace))
	envelopes, errs := r.client.EventService().Subscribe(ctx, filter)
	out := make(chan runtime.ImageEvent, 256)
	outErr := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case env, ok := <-envelopes:
				if !ok {
					if ctx.Err() == nil {
						outErr <- errors.New("watching image events: the stream ended")
					}
					return
				}
				v, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				var ev runtime.ImageEvent
				switch e := v.(type) {
				case *eventtypes.ImageCreate:
					ev = runtime.ImageEvent{Kind: runtime.ImageCreated, Name: e.Name, Labels: e.Labels}
				case *eventtypes.ImageUpdate:
					ev = runtime.ImageEvent{Kind: runtime.ImageUpdated, Name: e.Name, Labels: e.Labels}
				case *eventtypes.ImageDelete:
					ev = runtime.ImageEvent{Kind: runtime.ImageDeleted, Name: e.Name}
				default:
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case err, ok := <-errs:
				if ctx.Err() == nil {
					if !ok || err == nil {
						err = errors.New("the stream ended")
					}
					outErr <- fmt.Errorf("watching image events: %w", err)
				}
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, outErr
}
