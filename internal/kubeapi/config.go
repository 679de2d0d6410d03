// Package kubeapi reads objects from a Kubernetes API server for holdfast's
// read-only cluster views (holdfast check --cluster): the kubeconfig is
// loaded as kubectl loads it (client-go's clientcmd); the Nodes, the
// NodeImages and the ImageSet objects are listed as JSON with client-go's
// REST client and each decoded, as it streams, into its type (its own Node,
// internal/report's NodeImages, internal/imageset's ImageSet). The typed
// clientset is not used: its scheme registers every API group and would
// grow the holdfast binary by two thirds.
package kubeapi

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options say where the configuration comes from.
type Options struct {
	// Kubeconfig is one file (--kubeconfig); "": $KUBECONFIG (a
	// ':'-separated list, merged as kubectl merges it), else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Context is the context to use; "": the kubeconfig's current-context.
	Context   string
	UserAgent string
	// InCluster is where a pod's service account is mounted; "":
	// /var/run/secrets/kubernetes.io/serviceaccount.
	InCluster string
	// Home stands for the user's home directory; "": the one kubectl uses.
	Home string
}

// load finds the configuration as kubectl does, and says where it came
// from: the kubeconfig files and the context, else (no kubeconfig, or
// only empty ones) the pod's service account.
func load(o Options) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	if o.Home != "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		rules.Precedence = []string{filepath.Join(o.Home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
		rules.MigrationRules = nil
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	if o.Kubeconfig == "" && clientcmdapi.IsConfigEmpty(&raw) {
		return inCluster(o)
	}
	where := "kubeconfig " + strings.Join(present(rules.GetLoadingPrecedence()), ":")
	name, err := pick(raw, o.Context)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", where, err)
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", where, err)
	}
	return cfg, fmt.Sprintf("%s (context %s)", where, name), nil
}

// pick is the context to use, and refuses what holdfast cannot use: a
// context not there (naming those there), a user with an auth-provider.
func pick(raw clientcmdapi.Config, name string) (string, error) {
	if name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		return "", errors.New("no current-context; give --context")
	}
	ctx, ok := raw.Contexts[name]
	if !ok {
		var names []string
		for n := range raw.Contexts {
			names = append(names, n)
		}
		slices.Sort(names)
		return "", fmt.Errorf("context %q not found (contexts: %s)", name, strings.Join(names, ", "))
	}
	if u := raw.AuthInfos[ctx.AuthInfo]; u != nil && u.AuthProvider != nil {
		return "", fmt.Errorf("user %q: auth-provider is not supported; use an exec credential plugin (kubelogin, gke-gcloud-auth-plugin, …)", ctx.AuthInfo)
	}
	return name, nil
}

// present are the files of paths that exist: those kubectl read.
func present(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// inCluster is the configuration of a pod's service account, as
// rest.InClusterConfig makes it, from the directory o names.
func inCluster(o Options) (*rest.Config, string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, "", errors.New("no kubeconfig: give --kubeconfig, or set $KUBECONFIG, or write ~/.kube/config; and not in a pod (KUBERNETES_SERVICE_HOST is not set)")
	}
	dir := o.InCluster
	if dir == "" {
		dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")},
		BearerTokenFile: filepath.Join(dir, "token"),
	}, "the pod's service account (" + dir + ")", nil
}
