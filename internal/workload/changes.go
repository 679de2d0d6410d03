package workload

import (
	"fmt"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/units"
)

// EventEach is how many required images changing state at once get an
// event each; more get one event naming that many of them.
const EventEach = 5

// Changes are the events that say how the images of set moved from the
// states prev to now (by reference; prev empty: the first judgment): an
// image gone missing or mismatched, one left unpinned, one pinned again; a
// few images an event each, more one event for them all, so that the Node
// gets a few Events, not thousands. Seq and Time are the journal's to set.
func Changes(set *report.RequiredSet, prev, now map[string]report.State) []report.Event {
	changed := map[string][]string{} // journal reason → what each image says
	for _, img := range set.Images {
		was, is := prev[img.Ref], now[img.Ref]
		if was == is {
			continue
		}
		who := img.Ref
		if len(img.UsedBy) > 0 {
			who += " (" + units.List(img.UsedBy, 1) + ")"
		}
		switch is {
		case report.Missing, report.Mismatch:
			changed[journal.ReasonImageMissing] = append(changed[journal.ReasonImageMissing], who+" is "+string(is))
		case report.Present:
			changed[journal.ReasonImageUnpinned] = append(changed[journal.ReasonImageUnpinned], who)
		case report.Pinned:
			if was != "" {
				changed[journal.ReasonImageReady] = append(changed[journal.ReasonImageReady], who)
			}
		}
	}
	var out []report.Event
	for _, ev := range []struct {
		reason, typ, one, many string
	}{
		{journal.ReasonImageMissing, journal.Warning, "required image %s on this node: the kubelet would pull it", "%d required images are missing on this node (the kubelet would pull them): %s"},
		{journal.ReasonImageUnpinned, journal.Warning, "required image %s is not pinned: the kubelet's image GC may delete it", "%d required images are not pinned (the kubelet's image GC may delete them): %s"},
		{journal.ReasonImageReady, journal.Normal, "required image %s is pinned", "%d required images are pinned again: %s"},
	} {
		imgs := changed[ev.reason]
		if len(imgs) <= EventEach {
			for _, img := range imgs {
				out = append(out, report.Event{Type: ev.typ, Reason: ev.reason, Message: fmt.Sprintf(ev.one, img)})
			}
			continue
		}
		out = append(out, report.Event{Type: ev.typ, Reason: ev.reason,
			Message: fmt.Sprintf(ev.many, len(imgs), units.List(imgs, EventEach))})
	}
	return out
}
