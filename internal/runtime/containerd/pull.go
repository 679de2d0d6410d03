package containerd

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/semaphore"

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
// the hosts.toml configuration in opts.HostsDir, under the lease opts.Lease,
// and the signatures the registry holds for it, if any (fetchSignatures),
// through the same hosts; the content first from opts.Prefer, a peer's
// mirror, when set (preferHost). It makes no record: the pass names and
// pins what it wants, and nothing else, so that an image the signature
// policy refuses keeps no name.
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
	hosts := config.HostOptions{Credentials: opts.Credentials, UpdateClient: boundWaits}
	if opts.HostsDir != "" {
		hosts.HostDir = config.HostDirFromRoot(opts.HostsDir)
	}
	reg := registry{log: opts.Log}
	if reg.log == nil {
		reg.log = slog.New(slog.DiscardHandler)
	}
	reg.hosts = preferHost(config.ConfigureHosts(ctx, hosts), opts.Prefer, reg.log)
	reg.resolver = docker.NewResolver(docker.ResolverOptions{Hosts: reg.hosts})
	target, err := r.fetch(ctx, reg.resolver, ref, r.platform.Matcher())
	if err != nil {
		return runtime.Want{}, err
	}
	w := runtime.Want{Name: ref, Target: target}
	if reg.repo, err = reference.ParseNormalizedNamed(ref); err == nil {
		w.Signatures = r.fetchSignatures(ctx, reg, target.Digest)
	}
	return w, nil
}

// responseTimeout is how long a registry may take to answer a request once
// it has it (to send its response headers); a TLS handshake may take 10 s
// and a connection 30 s (containerd's defaults). A registry that accepts a
// connection and never answers fails a try of a pull within 40 s, well
// before the pull's own timeout, which bounds the whole of it.
const responseTimeout = 30 * time.Second

// boundWaits has the registry client give up on a registry that does not
// answer after responseTimeout.
func boundWaits(c *http.Client) error {
	if t, ok := c.Transport.(*http.Transport); ok {
		t.ResponseHeaderTimeout = responseTimeout
	}
	return nil
}

// fetch fetches ref's content for the platforms match takes into the
// content store, with the labels containerd's own fetch gives it (its
// children's, for the GC, and the registry it came from), and returns its
// descriptor. Unlike containerd's client, it records no image.
func (r *Runtime) fetch(ctx context.Context, resolver remotes.Resolver, ref string, match platforms.MatchComparer) (ocispec.Descriptor, error) {
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("resolving %s: %w", ref, err)
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("fetching %s: %w", ref, err)
	}
	cs := r.client.ContentStore()
	children := images.FilterPlatforms(images.SetChildrenMappedLabels(cs, images.ChildrenHandler(cs), nil), match)
	source, err := docker.AppendDistributionSourceLabel(cs, ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	handler := images.Handlers(remotes.FetchHandler(cs, fetcher), children, source)
	if err := images.Dispatch(ctx, handler, semaphore.NewWeighted(4), desc); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("fetching %s: %w", ref, err)
	}
	return desc, nil
}
