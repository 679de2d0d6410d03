package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-project/holdfast/internal/agent"
	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/metrics"
	"github.com/holdfast-project/holdfast/internal/registries"
	"github.com/holdfast-project/holdfast/internal/server"
)

// runFlags are run's own flags.
type runFlags struct {
	parallel       int
	listen         string
	settle, resync time.Duration
	pullReq        bool
	grace          time.Duration
	tokenFile      string
}

func newRun(o *options) *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: keep containerd in line with the images dirs until SIGTERM or SIGINT",
		Long:  runLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), rf)
		},
		Annotations: claims,
	}
	rf.add(cmd.Flags())
	return cmd
}

func (rf *runFlags) add(f *pflag.FlagSet) {
	f.IntVar(&rf.parallel, "parallel", 0, "archives imported at once; 0: from the CPU count")
	f.StringVar(&rf.listen, "listen", server.DefaultAddr, "address for /metrics, /healthz, /readyz, /report and /required; empty disables")
	f.DurationVar(&rf.settle, "settle", 2*time.Second, "a file is complete once its mtime is this old, or it stayed unchanged this long")
	f.DurationVar(&rf.resync, "resync", 5*time.Minute, "full pass at least this often")
	f.BoolVar(&rf.pullReq, "pull-required", false, "pull the images the node's workloads need (PUT /required) and the node lacks through its registry mirrors (its peers' spegel), and keep them pinned as the peer source "+datadir.At("<data-dir>").PeerList())
	f.DurationVar(&rf.grace, "peer-grace", agent.DefaultPeerGrace, "with --pull-required: how long an image that no workload on the node needs any more stays on the peer source")
	f.StringVar(&rf.tokenFile, "token-file", "", "file with the token of the agent's own reporter, the one caller that may PUT /required (it sends it as a bearer token); made when missing (random, mode 0640 with root's group); refused when others may read or change it; default "+datadir.At("<data-dir>").Token())
	flagenv.Allow(f, "parallel", "listen", "settle", "resync", "pull-required", "peer-grace", "token-file")
}

// run is the agent until SIGTERM or SIGINT: its session on containerd and
// the registry config set up, then its parts run (runParts).
func (o *options) run(parent context.Context, rf runFlags) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	cfg, hosts, err := o.agentConfig(rf.parallel)
	if err != nil {
		return err
	}
	cfg.Settle, cfg.Resync = rf.settle, rf.resync
	cfg.PullRequired, cfg.PeerGrace = rf.pullReq, rf.grace
	cfg.PeerList, cfg.SetLists = o.layout().PeerList(), o.layout().SetLists()
	s, err := o.openPasses(ctx, "run", &cfg, hosts)
	if err != nil {
		return err
	}
	defer s.close()
	if why := s.rt.ContentRootOff(ctx); why != nil {
		off := fmt.Sprintf("the content store's directory: %v", why)
		o.log.Warn(off)
		cfg.FeaturesOff = append(cfg.FeaturesOff, off)
	}
	reg := prometheus.NewRegistry()
	// The Go runtime's and the process's own: goroutines, memory, open files.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := agent.New(s.rt, cfg, metrics.New(reg))
	var srv *server.Server
	restore := func() error { return nil }
	if rf.listen != "" {
		if srv, restore, err = o.serve(ctx, rf.listen, rf.tokenFile, reg, s, a); err != nil {
			return err
		}
	}
	if err := o.runParts(ctx, s, a, srv, func(ctx context.Context) { o.keepDataDir(ctx, s.lock, rf.parallel, hosts, restore) }); err != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	o.log.Info("stopping")
	return nil
}

// runParts runs the daemon's parts with the agent (agent.Daemon): the
// embedded containerd's watch, keep (the data dir's) and the server when
// there is one.
func (o *options) runParts(ctx context.Context, s *session, a *agent.Agent, srv *server.Server, keep func(context.Context)) error {
	parts := []func(context.Context) error{func(ctx context.Context) error { keep(ctx); return nil }}
	if s.proc != nil {
		parts = append(parts, func(ctx context.Context) error {
			select {
			case <-s.proc.Done():
				return fmt.Errorf("the embedded containerd exited: %w", s.proc.Err())
			case <-ctx.Done():
				return nil
			}
		})
	}
	if srv != nil {
		parts = append(parts, srv.Run)
	}
	return a.Daemon(ctx, func() { o.log.Info("ready: every source of the first pass is final") }, parts...)
}

// runLong is run's help.
const runLong = `run is the agent: it holds the data dir, runs a pass at start-up, then watches
the images dirs (a new or changed archive is imported once it has stayed
unchanged for --settle; a deleted one is unpinned and its lease released) and
containerd's image events (a wanted record that is deleted, re-pointed or
stripped of a pin label is restored from leased content at once). A full pass
also runs every --resync, and after containerd comes back from a restart.
Spool dirs (--spool) are watched like images dirs.

It serves /metrics, /healthz, /readyz and /report (read by holdfast-reporter)
on --listen, and takes PUT /required from loopback with the token of
--token-file only (the reporter's set of the images the node's workloads
need, judged on every pass and image event: GET /report's "required",
holdfast_required_images, ImageMissing, ImageUnpinned and ImageReady
events). With --pull-required, each image of
that set the node lacks or holds unpinned is pulled through the node's
registry mirrors (spegel serves what its peers hold), pinned and leased as
the peer source <data-dir>/peers/required.txt, and released --peer-grace
after no workload on the node needs it any more; nothing another source
wants is unpinned. It tells systemd
READY=1 (Type=notify) once every source of the first pass is final.`

// serve makes the agent's HTTP server on listen and binds it. Its
// state-changing endpoints take only requests with the token of tokenFile
// (default <data-dir>/token, made when missing); a token file that others may
// read or change is bad usage (exit 2). restore writes the token back when its
// file is gone.
func (o *options) serve(ctx context.Context, listen, tokenFile string, reg *prometheus.Registry, s *session, a *agent.Agent) (srv *server.Server, restore func() error, err error) {
	srv = server.New(listen, reg, func(ctx context.Context) error {
		_, err := s.rt.Server(ctx)
		return err
	}, a.Ready)
	if tokenFile == "" {
		tokenFile = o.layout().Token()
	}
	token, err := server.LoadToken(tokenFile, o.insecurePerms)
	if err != nil {
		return nil, nil, &usageError{err}
	}
	srv.Owner(token)
	srv.Report(a.Report)
	srv.Required(a.SetRequired)
	srv.Sets(a.SetSets)
	srv.Held(a.Held)
	if err := srv.Listen(ctx); err != nil {
		return nil, nil, err
	}
	o.log.Info("serving /metrics, /healthz, /readyz, /report, /required, /sets and /held", "address", srv.Addr())
	return srv, func() error { return server.RestoreToken(tokenFile, token) }, nil
}

// keepDataDir keeps the data dir's lock while the agent runs (Lock.Guard).
// A data dir deleted under the agent (rm -rf) would leave it holding a lock
// on a deleted file: a sync could then run beside it, and <data-dir>/pins
// would go unwatched. So the dir, its lock and owner, the pins dir (the
// watcher watches it again once it is back) and the registry config, and the
// reporter's token (restore), are made again, loudly.
func (o *options) keepDataDir(ctx context.Context, lock *datadir.Lock, parallel int, hosts registries.Hosts, restore func() error) {
	lock.Guard(ctx, func(err error) {
		o.log.Error("the data dir was deleted under the agent, and its lock cannot be taken again yet; retrying every second", "dir", o.dataDir, "error", err)
	}, func() {
		o.log.Error("the data dir was deleted under the agent: made it again, with its lock; what else it held (the state cache) is rebuilt as it is needed", "dir", o.dataDir)
		if _, err := o.passConfig(parallel); err != nil {
			o.log.Error("making the data dir's contents again", "dir", o.dataDir, "error", err)
		}
		if _, err := o.writeRegistryConfig(hosts); err != nil {
			o.log.Error("making the data dir's contents again", "dir", o.dataDir, "error", err)
		}
		if err := restore(); err != nil {
			o.log.Error("writing the reporter's token again", "error", err)
		}
	})
}
