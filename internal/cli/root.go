// Package cli holds holdfast's commands, one file each.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/agent"
	"github.com/holdfast-project/holdfast/internal/cmddoc"
	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/progress"
	"github.com/holdfast-project/holdfast/internal/registries"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
)

// ExitError carries a process exit code out of a command.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode maps an error from Execute to a process exit code: 0 none, 2 bad
// usage, else the command's own code or 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

type usageError struct{ error }

// options are the flags every command shares.
type options struct {
	address   string
	images    []string
	spool     []string
	dataDir   string
	namespace string
	logLevel  string
	logFormat string
	log       *slog.Logger
	logOut    *progress.Log // where log writes

	registryConfig string
	registriesYAML string
	peerMirror     string // the node's spegel: first host of the peer registries' hosts.toml
	peerRegistries string
	pullTimeout    time.Duration

	insecurePerms bool

	contentRoot string
	minFree     minFreeValue
	writePath   writePathValue

	policyFile string
	policy     *signature.Policy // loaded from policyFile by complete, or adopted (adoptPolicy)
	// policyInForce is the policy an agent put in force in the namespace,
	// when the command judges by it (adoptPolicy).
	policyInForce *runtime.PolicyInForce
	// use is how the command uses the namespace (its useAnnotation): empty
	// when it only reads.
	use string
}

// dataDirDefault is --data-dir's default as the help and the docs say it; the
// flag's own default is what it comes to for this user.
const dataDirDefault = "/var/lib/holdfast as root, else $XDG_STATE_HOME/holdfast"

// New builds the holdfast command tree.
func New(version, commit string) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "holdfast",
		Short: "Keep air-gapped images in containerd: import archives, pin them, lease their content",
		Long: `holdfast imports the image archives in its images directories into containerd,
pins every image they hold (io.cri-containerd.pinned, so the kubelet's image GC
keeps it) and holds their content with a lease per source (so containerd's GC
keeps it too).

The data dir is locked by the process that owns it. While holdfast run is up,
holdfast status, plan, import and release attach to the containerd it uses, and
holdfast sync refuses with a message naming the running agent.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return o.complete(cmd)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&o.address, "address", "", "containerd socket to use; empty starts holdfast's embedded containerd in --data-dir. K3s: /run/k3s/containerd/containerd.sock; plain containerd: /run/containerd/containerd.sock")
	pf.StringArrayVar(&o.images, "images", nil, "images directory, repeatable; default <data-dir>/images")
	pf.StringArrayVar(&o.spool, "spool", nil, "spool directory, repeatable: sync and run import each archive dropped there as a kept source, then delete it; see docs/kept-sources.md")
	pf.StringVar(&o.dataDir, "data-dir", datadir.Default(), "holdfast's data directory: "+dataDirDefault)
	pf.StringVar(&o.namespace, "namespace", "k8s.io", "containerd namespace")
	pf.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.StringVar(&o.logFormat, "log-format", "auto", "auto (text on a terminal, else JSON), text or json")
	pf.StringVar(&o.registryConfig, "registry-config", "", "hosts.toml directory for pull lists, containerd's certs.d layout; default <data-dir>/registry.d, which the embedded containerd's CRI uses too")
	pf.StringVar(&o.registriesYAML, "registries-yaml", "", "K3s registries.yaml whose mirrors, TLS settings and credentials pulls use; its mirrors are written as hosts.toml files into --registry-config. K3s: /etc/rancher/k3s/registries.yaml")
	pf.StringVar(&o.peerMirror, "peer-mirror", "", "the node's own peer mirror (spegel's registry, http://NODE-IP:PORT; an IPv6 NODE-IP with or without brackets): written into --registry-config as the first host of each --peer-registries registry's hosts.toml, before registries.yaml's mirrors and the registry; see docs/many-nodes.md")
	pf.StringVar(&o.peerRegistries, "peer-registries", strings.Join(registries.DefaultPeerRegistries, ","), "with --peer-mirror: the registries it serves, comma-separated; * or _default is every registry without a hosts.toml of its own (containerd's _default)")
	pf.StringVar(&o.contentRoot, "content-root", "", "containerd's content store directory as holdfast sees it, whose filesystem imports check for free space; default: what containerd reports")
	pf.Var(&o.minFree, "min-free", "free space an import must leave on the content store's filesystem: a size (2GiB, 500MB; 0: the archive must only fit) or a percentage of the filesystem (5%); default 5% of the filesystem, at most 1GiB; see docs/how-it-works.md#disk-space")
	pf.Var(&o.writePath, "write-path", "how imports write blobs: stream (through containerd's content API), direct (into the content store's directory, recorded by metadata only; imports fail when it is not usable) or auto (direct when usable, else stream); see docs/how-it-works.md#write-path")
	pf.BoolVar(&o.insecurePerms, "insecure-perms", false, "read images dirs, spool dirs, pull/pin lists, --registries-yaml and the signature policy's files (--policy, its keys and trusted roots) that users other than root and holdfast's own can change (group- or world-writable, or another user's, up to /), and write into such a --registry-config; without it each such dir or list is a failed source, such a policy file a bad policy, and such a registries.yaml or registry config a usage error, naming the path and why; see docs/security.md")
	pf.DurationVar(&o.pullTimeout, "pull-timeout", 2*time.Minute, "time for the whole of one pull of a pull-list entry; a registry that accepts a connection and never answers fails a try within 40s (10s for TLS, 30s for response headers); under run, pulls never hold a pass")
	pf.StringVar(&o.policyFile, "policy", "", "signature policy file: which keys or keyless identities must have signed which images; under mode enforce an image that is not verified is not pinned, under warn its verdict is reported. holdfast run puts it in force in the namespace, and commands without --policy then judge by it; see docs/signatures.md")
	flagenv.Allow(pf, "address", "images", "spool", "data-dir", "namespace", "log-level", "log-format", "registry-config",
		"registries-yaml", "peer-mirror", "peer-registries", "content-root", "min-free", "write-path", "insecure-perms", "pull-timeout", "policy")
	// The default depends on the user and the environment: the docs say how.
	cmddoc.SetDefault(pf, "data-dir", dataDirDefault)

	root.AddCommand(newSync(o), newRun(o), newStatus(o), newPlan(o), newCheck(o), newImport(o), newExport(o), newRelease(o), newPin(o), newUnpin(o), newVerify(), newVersion(version, commit), newContainerd())
	return root
}

// complete applies environment variables to flags not given, then derives defaults.
func (o *options) complete(cmd *cobra.Command) error {
	if err := applyEnv(cmd); err != nil {
		return err
	}
	o.logOut = progress.NewLog(cmd.ErrOrStderr())
	log, err := newLogger(o.logOut, o.logLevel, o.logFormat)
	if err != nil {
		return &usageError{err}
	}
	o.log = log
	o.use = cmd.Annotations[useAnnotation]
	if o.dataDir == "" {
		return &usageError{errors.New("--data-dir must not be empty")}
	}
	if abs, err := filepath.Abs(o.dataDir); err == nil {
		o.dataDir = abs
	}
	if o.registryConfig == "" {
		o.registryConfig = o.layout().RegistryConfig()
	}
	if o.policyFile != "" {
		if abs, err := filepath.Abs(o.policyFile); err == nil {
			o.policyFile = abs
		}
		if o.policy, err = signature.LoadWith(o.policyFile, signature.Options{InsecurePerms: o.insecurePerms}); err != nil {
			return &usageError{fmt.Errorf("signature policy:\n%w", err)}
		}
	}
	return o.checkSpoolDirs()
}

// applyEnv sets each flag of cmd that was not given from its environment
// variable.
func applyEnv(cmd *cobra.Command) error {
	if err := flagenv.SetAll(cmd.Flags(), os.LookupEnv); err != nil {
		return &usageError{err}
	}
	return nil
}

// agentConfig is the agent configuration the common flags give: images dirs,
// the node's registries (registries.yaml and the peer mirror, applied by
// registries.Settings) and the logger, with no side effect on the registry
// config: the hosts.toml files they make are returned for
// writeRegistryConfig, which writes them once containerd answers. A bad
// --peer-mirror or --peer-registries is a usage error naming it.
func (o *options) agentConfig(parallel int) (agent.Config, registries.Hosts, error) {
	pc, err := o.passConfig(parallel)
	cfg := agent.Config{Config: pc}
	if err != nil {
		return cfg, registries.Hosts{}, err
	}
	hosts, err := registries.Settings{YAML: o.registriesYAML, PeerMirror: o.peerMirror, PeerRegistries: strings.Split(o.peerRegistries, ","),
		Dir: o.registryConfig, InsecurePerms: o.insecurePerms}.Hosts()
	if hosts.Off != "" {
		o.log.Warn(hosts.Off)
		cfg.FeaturesOff = append(cfg.FeaturesOff, hosts.Off)
	}
	for _, w := range hosts.Warnings {
		o.log.Warn(w)
	}
	cfg.Credentials, cfg.PeerMirror = hosts.Credentials, hosts.PeerMirror
	return cfg, hosts, registriesError(err)
}

// writeRegistryConfig writes what agentConfig made of --registry-config
// (registries.Hosts.Write): a dir it refuses is a usage error.
func (o *options) writeRegistryConfig(h registries.Hosts) ([]string, error) {
	skipped, err := h.Write()
	return skipped, registriesError(err)
}

// registriesError makes what registries refuses of the flags a usage error.
func registriesError(err error) error {
	var bad *registries.SettingError
	var refused *registries.RefusedError
	if errors.As(err, &bad) || errors.As(err, &refused) {
		return &usageError{err}
	}
	return err
}

// passConfig is what a pass is given of the flags, with no side effect
// (agentConfig applies registries.yaml besides; a dry run pulls nothing).
func (o *options) passConfig(parallel int) (pass.Config, error) {
	dirs, err := o.layout().ImageDirs(o.images)
	if err != nil {
		return pass.Config{}, err
	}
	spool, err := o.spoolDirs()
	if err != nil {
		return pass.Config{}, err
	}
	return pass.Config{ImageDirs: dirs, SpoolDirs: spool, Parallel: parallel, RegistryConfig: o.registryConfig, PullTimeout: o.pullTimeout, InsecurePerms: o.insecurePerms, Log: o.log,
		Policy: o.policyFile}, nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "auto", "":
		out := w
		if l, ok := w.(*progress.Log); ok {
			out = l.Out()
		}
		if f, ok := out.(*os.File); ok && isTerminal(f) {
			return slog.New(slog.NewTextHandler(w, hopts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, text or json", format)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
