package runtimetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// eventWait bounds the wait for one event.
const eventWait = 10 * time.Second

// watchSeesChanges: once the stream is live, a record made by someone else
// comes as a create, a Pin as a create (a new record) or an update (where
// the store reports its own writes), and Delete of a record holdfast made as
// a delete, each under the record's name.
func watchSeesChanges(t *testing.T, s Store, name string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, errs := s.Runtime.WatchImages(ctx)
	awaitLive(t, s, evs, name)

	user, made := name+"-user", name+"-made"
	s.CreateRecord(t, runtime.Image{Name: user, Target: s.Targets[0]})
	awaitEvent(t, evs, errs, runtime.ImageCreated, user, "a record someone else made")
	pin(t, s.Backend, runtime.Want{Name: made, Target: s.Targets[0]}, true)
	if s.Can.PinEvents {
		awaitEvent(t, evs, errs, runtime.ImageCreated, made, "a Pin that made the record")
		pin(t, s.Backend, runtime.Want{Name: user, Target: s.Targets[0]}, true)
		awaitEvent(t, evs, errs, runtime.ImageUpdated, user, "a Pin that labelled the record")
	} else {
		t.Log("the store does not report its own pins as events (Capabilities.PinEvents false): Pin's events not checked")
	}
	if err := s.Runtime.Delete(ctx, made, s.Targets[0].Digest); err != nil {
		t.Fatalf("delete %s: %v", made, err)
	}
	awaitEvent(t, evs, errs, runtime.ImageDeleted, made, "Delete of a record holdfast made")
}

// awaitLive makes records until the stream delivers one's create: a stream
// goes live a moment after WatchImages returns.
func awaitLive(t *testing.T, s Store, evs <-chan runtime.ImageEvent, name string) {
	t.Helper()
	for i := 1; i <= 20; i++ {
		probe := fmt.Sprintf("%s-live-%d", name, i)
		s.CreateRecord(t, runtime.Image{Name: probe, Target: s.Targets[1]})
		timeout := time.After(500 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case ev, ok := <-evs:
				if !ok {
					t.Fatal("the event stream ended before it went live")
				}
				if ev.Name == probe {
					return
				}
			case <-timeout:
				waiting = false
			}
		}
	}
	t.Fatal("the event stream never delivered the create of a new record")
}

// awaitEvent waits for an event of kind on name; other events pass by.
func awaitEvent(t *testing.T, evs <-chan runtime.ImageEvent, errs <-chan error, kind runtime.ImageEventKind, name, what string) {
	t.Helper()
	timeout := time.After(eventWait)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("%s: the event stream ended before a %s of %s", what, kind, name)
			}
			if ev.Kind == kind && ev.Name == name {
				return
			}
		case err := <-errs:
			t.Fatalf("%s: the event stream broke: %v", what, err)
		case <-timeout:
			t.Fatalf("%s: no %s event for %s within %s", what, kind, name, eventWait)
		}
	}
}
