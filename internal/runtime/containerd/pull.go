package containerd

import (
	"context"
	"fmt"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// TempLease makes a lease that holds content until it is released, for
// content fetched before its source's own lease exists. It expires by itself
// after an hour, should holdfast die before releasing it.
func (r *Runtime) TempLease(ctx context.Context) (string, error) {
	id := runtime.LeasePrefix + "tmp-" + randomHex(8)
	if _, err := r.client.LeasesService().Create(r.ns(ctx), leases.WithID(id), leases.WithExpiration(time.Hour)); err != nil {
		return "", fmt.Errorf("creating lease %s: %w", id, err)
	}
	return id, nil
}

// Pull fetches the host platform's content of ref from its registry, through
// the hosts.toml configuration in opts.HostsDir, under the lease opts.Lease.
// It creates the record if none exists (without pin labels: the pass pins it).
func (r *Runtime) Pull(ctx context.Context, ref string, opts runtime.PullOptions) (runtime.Want, error) {
	ctx = r.ns(ctx)
	if opts.Lease != "" {
		ctx = leases.WithLease(ctx, opts.Lease)
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	hosts := config.HostOptions{Credentials: opts.Credentials}
	if opts.HostsDir != "" {
		hosts.HostDir = config.HostDirFromRoot(opts.HostsDir)
	}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: config.ConfigureHosts(ctx, hosts)})
	img, err := r.client.Fetch(ctx, ref,
		containerd.WithResolver(resolver),
		containerd.WithPlatformMatcher(r.platform.Matcher()),
		containerd.WithMaxConcurrentDownloads(4))
	if err != nil {
		return runtime.Want{}, err
	}
	return runtime.Want{Name: ref, Target: img.Target}, nil
}
