package reporter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/holdfast-project/holdfast/internal/imageset"
)

// Lease is the leader election of the reporters: the one holding the Lease
// writes each ImageSet's status.
type Lease struct {
	Name      string // the Lease's name
	Namespace string // and namespace
	// Duration, Renew and Retry are leaderelection's LeaseDuration,
	// RenewDeadline and RetryPeriod (15 s, 10 s, 2 s when 0).
	Duration, Renew, Retry time.Duration
}

// leader takes part in the election and, while it holds the Lease, writes
// the status of each ImageSet from the NodeImages and the Nodes' labels.
type leader struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	caches *setCaches // the process's, run by its caller
	node   string
	lease  Lease
	log    *slog.Logger
	now    func() time.Time

	failed string // the last write's error, logged once

	mu    sync.Mutex
	wrote map[string]wroteStatus // by set: the last status written
}

// isWritten reports whether the status of s is the last this leader wrote
// of it.
func (l *leader) isWritten(s *cachedSet) bool {
	have, err := json.Marshal(s.set.Status)
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.wrote[s.Name]
	return err == nil && ok && w.status == string(have)
}

// wroteStatus is a status written (JSON) over the object of resourceVersion
// from: while the cache holds that object still, it is what the set has.
type wroteStatus struct {
	from, status string
}

// run stands for election until ctx ends; each time it leads, it writes
// statuses until it loses the Lease, which it gives up when ctx ends.
func (l *leader) run(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: l.lease.Name, Namespace: l.lease.Namespace},
		Client:     l.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.node},
	}
	d, renew, retry := l.lease.Duration, l.lease.Renew, l.lease.Retry
	if d <= 0 || renew <= 0 || retry <= 0 {
		d, renew, retry = 15*time.Second, 10*time.Second, 2*time.Second
	}
	for ctx.Err() == nil {
		var le *leaderelection.LeaderElector
		var led atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: d, RenewDeadline: renew, RetryPeriod: retry, ReleaseOnCancel: true,
			Name: l.lease.Namespace + "/" + l.lease.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					led.Store(true)
					l.log.Info("leading: writing the ImageSets' status", "lease", l.lease.Namespace+"/"+l.lease.Name, "node", l.node)
					l.lead(ctx, le.IsLeader)
				},
				OnStoppedLeading: func() {
					if led.Load() {
						l.log.Info("not leading any more: the ImageSets' status is another's to write", "lease", l.lease.Namespace+"/"+l.lease.Name, "node", l.node)
					}
				},
			},
		})
		if err != nil {
			l.log.Error("electing the leader that writes the ImageSets' status", "error", err)
			return
		}
		le.Run(ctx)
	}
}

// lead watches the ImageSets and the NodeImages (the process's caches) and
// the Nodes' labels, and writes each set's status when it changes, while
// ctx lasts and isLeader says so.
func (l *leader) lead(ctx context.Context, isLeader func() bool) {
	l.mu.Lock()
	l.wrote = nil // what the last term wrote is in the cache, or another's since
	l.mu.Unlock()
	changed := make(chan struct{}, 1)
	// The status this leader wrote, as it comes back, changes nothing.
	remove, err := l.caches.watch(changed, func(o, n *cachedSet) bool { return statusOnly(o, n) && l.isWritten(n) })
	if err != nil {
		l.log.Error("watching the ImageSets", "error", err)
		return
	}
	defer remove()
	nf := informers.NewSharedInformerFactoryWithOptions(l.client, 0, informers.WithTransform(onlyLabels))
	nodes := nf.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(notifier(changed)); err != nil {
		l.log.Error("watching the Nodes", "error", err)
		return
	}
	defer nf.Shutdown()
	nf.Start(ctx.Done())
	if !l.caches.synced(ctx) || !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return
	}
	labels := func(name string) map[string]string {
		o, ok, _ := nodes.GetStore().GetByKey(name)
		if n, isNode := o.(*corev1.Node); ok && isNode {
			if n.Labels == nil {
				return map[string]string{}
			}
			return n.Labels
		}
		return nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	pending := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if !pending {
				pending = true
				timer.Reset(setsDebounce)
			}
			continue
		case <-timer.C:
		}
		pending = false
		if !l.writeAll(ctx, l.caches.sets.GetStore(), cachedNodes(l.caches.nodes.GetStore(), labels), isLeader) {
			pending = true
			timer.Reset(time.Second) // a failed write: again soon, from the caches as they are then
		}
	}
}

// writeAll writes the status of each set that differs from what the set
// has; it stops at once when isLeader says no more. It reports whether
// every write it tried went through.
func (l *leader) writeAll(ctx context.Context, store cache.Store, nodes []imageset.Node, isLeader func() bool) bool {
	sets, objs, _ := cachedSets(store)
	now := l.now().UTC().Truncate(time.Second)
	ok := true
	for i, set := range sets {
		if ctx.Err() != nil || !isLeader() {
			return true
		}
		st := imageset.Aggregate(set, imageset.States(set, nodes), now)
		want, err := json.Marshal(st)
		if err != nil {
			continue
		}
		if have, err := json.Marshal(set.Status); err == nil && string(have) == string(want) {
			continue
		}
		l.mu.Lock()
		w, ok := l.wrote[set.Metadata.Name]
		l.mu.Unlock()
		if ok && w.from == objs[i].GetResourceVersion() && w.status == string(want) {
			continue // written, and the cache has not seen it yet
		}
		if err := l.write(ctx, objs[i], want); err != nil {
			ok = false
			if ctx.Err() != nil {
				return true
			}
			if msg := err.Error(); msg != l.failed {
				l.failed = msg
				l.log.Warn("writing an ImageSet's status; trying again", "imageset", set.Metadata.Name, "error", err)
			}
			continue
		}
		l.failed = ""
		l.mu.Lock()
		if l.wrote == nil {
			l.wrote = map[string]wroteStatus{}
		}
		l.wrote[set.Metadata.Name] = wroteStatus{from: objs[i].GetResourceVersion(), status: string(want)}
		l.mu.Unlock()
		l.log.Debug("wrote an ImageSet's status", "imageset", set.Metadata.Name, "selected", st.Nodes.Selected,
			"staged", st.Nodes.Staged, "failed", st.Nodes.Failed, "missingImages", st.MissingImages)
	}
	l.mu.Lock()
	for name := range l.wrote {
		if !slices.ContainsFunc(sets, func(s imageset.ImageSet) bool { return s.Metadata.Name == name }) {
			delete(l.wrote, name)
		}
	}
	l.mu.Unlock()
	return ok
}

// write replaces the status of the set obj (as cached: its resourceVersion
// makes a write from a stale cache fail) with status (JSON).
func (l *leader) write(ctx context.Context, obj *unstructured.Unstructured, status []byte) error {
	var m map[string]any
	if err := json.Unmarshal(status, &m); err != nil {
		return err
	}
	u := obj.DeepCopy()
	u.Object["status"] = m
	if _, err := l.dyn.Resource(imageSetsGVR).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("updating the status of ImageSet %s: %w", obj.GetName(), err)
	}
	return nil
}
