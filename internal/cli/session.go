package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/holdfast-project/holdfast/internal/agent"
	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/registries"
	"github.com/holdfast-project/holdfast/internal/runtime"
	hfcontainerd "github.com/holdfast-project/holdfast/internal/runtime/containerd"
)

// session is a connection to containerd, and what holdfast started or locked to get it.
type session struct {
	rt      *hfcontainerd.Runtime
	address string
	lock    *datadir.Lock
	proc    *embedded.Process
}

// openPasses opens the namespace as its owner (openOwner) for command, sync
// or run, and makes it ready for passes: cfg judges by the policy in force
// there when none was given, containerd's version is checked, and the
// registry config is written (writeRegistryConfig); what could not be written
// is said and set off in cfg.
func (o *options) openPasses(ctx context.Context, command string, cfg *agent.Config, hosts registries.Hosts) (*session, error) {
	s, err := o.openOwner(ctx, command)
	if err != nil {
		return nil, err
	}
	cfg.Policy = o.policyFile // the one in force in the namespace, when none was given
	if _, err := runtime.CheckServer(ctx, s.rt, o.log); err != nil {
		s.close()
		return nil, err
	}
	skipped, err := o.writeRegistryConfig(hosts)
	if err != nil {
		s.close()
		return nil, err
	}
	for _, off := range skipped {
		o.log.Warn(off)
		cfg.FeaturesOff = append(cfg.FeaturesOff, off)
	}
	return s, nil
}

// openOwner takes the data dir for command (sync, run) and connects: to
// --address, or to an embedded containerd it starts in the data dir. Another
// holdfast owning the data dir is an error that says who.
func (o *options) openOwner(ctx context.Context, command string) (*session, error) {
	lock, err := o.acquire(ctx, command)
	if err != nil {
		var le *datadir.LockedError
		if errors.As(err, &le) {
			return nil, fmt.Errorf("%w; %s refuses to run beside it (status, plan, pin and unpin attach to it instead)", err, command)
		}
		return nil, err
	}
	s := &session{lock: lock, address: o.address}
	if s.address == "" {
		s.proc, err = embedded.Start(ctx, o.dataDir, embedded.Options{})
		if err != nil {
			s.close()
			return nil, err
		}
		s.address = s.proc.Address()
		o.log.Debug("embedded containerd started", "address", s.address, "pid", s.proc.PID())
	}
	if err := lock.SetOwner(datadir.Owner{PID: os.Getpid(), Command: command, Address: s.address}); err != nil {
		s.close()
		return nil, err
	}
	if s.rt, err = hfcontainerd.New(ctx, s.address, o.namespace, o.writeOpts(hfcontainerd.WithOwner(o.dataDir))...); err != nil {
		s.close()
		return nil, err
	}
	if err := o.adoptPolicy(ctx, s, command); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// acquire takes the data dir's lock. The agent waits (up to a minute) for a
// short-lived holder — a status, plan or sync that started its own containerd
// a moment earlier — rather than fail; everything else fails at once.
func (o *options) acquire(ctx context.Context, command string) (*datadir.Lock, error) {
	deadline := time.Now().Add(time.Minute)
	logged := false
	for {
		lock, err := datadir.Acquire(o.dataDir, command)
		var le *datadir.LockedError
		if err == nil || command != "run" || !errors.As(err, &le) || le.Owner.Command == "run" || time.Now().After(deadline) {
			return lock, err
		}
		if !logged {
			o.log.Info("waiting for another holdfast process to release the data dir", "command", le.Owner.Command, "pid", le.Owner.PID)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeOpts are the options of a Runtime that imports (--min-free,
// --content-root, --write-path, the state cache, the log), with extra.
func (o *options) writeOpts(extra ...hfcontainerd.Option) []hfcontainerd.Option {
	return append([]hfcontainerd.Option{hfcontainerd.WithSpace(o.spaceOptions()), hfcontainerd.WithWritePath(o.writeOptions()),
		hfcontainerd.WithStateCache(o.layout().StateCache()), hfcontainerd.WithLog(o.log)}, extra...)
}

// openReader connects for a command that does not own the data dir (status,
// plan, import, release): to the containerd of the process that owns the data
// dir if there is one, else to --address, else to an embedded containerd it
// starts itself. Attached to a running agent's containerd, an import still
// takes its own --min-free and --content-root: they are in writeOpts.
func (o *options) openReader(ctx context.Context, command string) (*session, error) {
	address := o.address
	if address == "" {
		if owner, held := datadir.Held(o.dataDir); held {
			if owner.Address == "" {
				return nil, fmt.Errorf("data dir %s is in use by holdfast %s (pid %d), which has not connected to containerd yet; try again", o.dataDir, owner.Command, owner.PID)
			}
			address = owner.Address
			o.log.Debug("attaching", "owner", owner.Command, "pid", owner.PID, "address", address)
		}
	}
	if address == "" {
		return o.openOwner(ctx, command)
	}
	rt, err := hfcontainerd.New(ctx, address, o.namespace, o.writeOpts()...)
	if err != nil {
		return nil, err
	}
	s := &session{rt: rt, address: address}
	if err := o.adoptPolicy(ctx, s, command); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close disconnects, stops what the session started and releases the lock.
func (s *session) close() {
	if s.rt != nil {
		_ = s.rt.Close()
	}
	if s.proc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), containerdStopTimeout)
		_ = s.proc.Stop(ctx)
		cancel()
	}
	s.lock.Release()
}

// layout is where things lie in the data dir.
func (o *options) layout() datadir.Layout { return datadir.At(o.dataDir) }
