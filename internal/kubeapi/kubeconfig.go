// Package kubeapi reads objects from a Kubernetes API server with a
// kubeconfig found as kubectl finds it, without client-go: enough for
// holdfast's read-only cluster views (holdfast check --cluster).
package kubeapi

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
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
	// Home stands for the user's home directory; "": os.UserHomeDir.
	Home string
}

// kubeconfig is what holdfast reads of a kubeconfig file.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string  `yaml:"name"`
		Cluster cluster `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User user   `yaml:"user"`
	} `yaml:"users"`
	Contexts []namedContext `yaml:"contexts"`
}

type namedContext struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster string `yaml:"cluster"`
		User    string `yaml:"user"`
	} `yaml:"context"`
}

type cluster struct {
	Server                   string `yaml:"server"`
	CertificateAuthority     string `yaml:"certificate-authority"`
	CertificateAuthorityData string `yaml:"certificate-authority-data"`
	InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
	TLSServerName            string `yaml:"tls-server-name"`
	ProxyURL                 string `yaml:"proxy-url"`
	dir                      string // of the file that named it: relative paths start there
}

type user struct {
	Token                 string         `yaml:"token"`
	TokenFile             string         `yaml:"tokenFile"`
	ClientCertificate     string         `yaml:"client-certificate"`
	ClientCertificateData string         `yaml:"client-certificate-data"`
	ClientKey             string         `yaml:"client-key"`
	ClientKeyData         string         `yaml:"client-key-data"`
	Username              string         `yaml:"username"`
	Password              string         `yaml:"password"`
	Exec                  *execConfig    `yaml:"exec"`
	AuthProvider          map[string]any `yaml:"auth-provider"`
	dir                   string
}

// config is one context's cluster and user, merged from the files.
type config struct {
	source  string
	cluster cluster
	user    user
}

// load finds the configuration as kubectl does.
func load(o Options) (*config, error) {
	var files []string
	explicit := o.Kubeconfig != ""
	switch {
	case explicit:
		files = []string{o.Kubeconfig}
	case os.Getenv("KUBECONFIG") != "":
		for _, f := range filepath.SplitList(os.Getenv("KUBECONFIG")) {
			if f != "" && !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	default:
		home := o.Home
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		if home != "" {
			files = []string{filepath.Join(home, ".kube", "config")}
		}
	}
	var merged kubeconfig
	var read []string
	clusters := map[string]cluster{}
	users := map[string]user{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) && !explicit {
			continue // kubectl skips a missing file of $KUBECONFIG
		}
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", f, err)
		}
		var kc kubeconfig
		if err := yaml.Unmarshal(data, &kc); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", f, err)
		}
		read = append(read, f)
		dir := filepath.Dir(f)
		if merged.CurrentContext == "" {
			merged.CurrentContext = kc.CurrentContext
		}
		for _, c := range kc.Clusters {
			if _, ok := clusters[c.Name]; !ok {
				c.Cluster.dir = dir
				clusters[c.Name] = c.Cluster
			}
		}
		for _, u := range kc.Users {
			if _, ok := users[u.Name]; !ok {
				u.User.dir = dir
				users[u.Name] = u.User
			}
		}
		for _, c := range kc.Contexts {
			if !slices.ContainsFunc(merged.Contexts, func(m namedContext) bool { return m.Name == c.Name }) {
				merged.Contexts = append(merged.Contexts, c)
			}
		}
	}
	if len(read) == 0 {
		return inCluster(o)
	}
	where := "kubeconfig " + strings.Join(read, ":")
	name := o.Context
	if name == "" {
		name = merged.CurrentContext
	}
	if name == "" {
		return nil, fmt.Errorf("%s: no current-context; give --context", where)
	}
	var names []string
	for _, c := range merged.Contexts {
		names = append(names, c.Name)
		if c.Name != name {
			continue
		}
		cl, ok := clusters[c.Context.Cluster]
		if !ok {
			return nil, fmt.Errorf("%s: context %q: cluster %q not found", where, name, c.Context.Cluster)
		}
		if cl.Server == "" {
			return nil, fmt.Errorf("%s: cluster %q has no server", where, c.Context.Cluster)
		}
		u, ok := users[c.Context.User]
		if !ok && c.Context.User != "" {
			return nil, fmt.Errorf("%s: context %q: user %q not found", where, name, c.Context.User)
		}
		if u.AuthProvider != nil {
			return nil, fmt.Errorf("%s: user %q: auth-provider is not supported; use an exec credential plugin (kubelogin, gke-gcloud-auth-plugin, …)", where, c.Context.User)
		}
		return &config{source: fmt.Sprintf("%s (context %s)", where, name), cluster: cl, user: u}, nil
	}
	return nil, fmt.Errorf("%s: context %q not found (contexts: %s)", where, name, strings.Join(names, ", "))
}

// inCluster is the configuration of a pod's service account.
func inCluster(o Options) (*config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("no kubeconfig: give --kubeconfig, or set $KUBECONFIG, or write ~/.kube/config; and not in a pod (KUBERNETES_SERVICE_HOST is not set)")
	}
	dir := o.InCluster
	if dir == "" {
		dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	}
	return &config{
		source:  "the pod's service account (" + dir + ")",
		cluster: cluster{Server: "https://" + net.JoinHostPort(host, port), CertificateAuthority: filepath.Join(dir, "ca.crt")},
		user:    user{TokenFile: filepath.Join(dir, "token")},
	}, nil
}

// path resolves a path the file at dir named.
func resolve(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// pemOf is inline base64 data, else the file's contents.
func pemOf(what, data, file, dir string) ([]byte, error) {
	if data != "" {
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("%s-data: %w", what, err)
		}
		return b, nil
	}
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(resolve(dir, file))
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, resolve(dir, file), err)
	}
	return b, nil
}

// transport is the HTTP transport the cluster and the user's certificate
// call for: the cluster's CA alone when it names one, as kubectl has it.
func (c *config) transport() (*http.Transport, error) {
	cl, u := c.cluster, c.user
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cl.TLSServerName, InsecureSkipVerify: cl.InsecureSkipTLSVerify}
	ca, err := pemOf("certificate-authority", cl.CertificateAuthorityData, cl.CertificateAuthority, cl.dir)
	if err != nil {
		return nil, fmt.Errorf("%s: cluster: %w", c.source, err)
	}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s: cluster: certificate-authority: no PEM certificate", c.source)
		}
		tc.RootCAs = pool
	}
	cert, err := pemOf("client-certificate", u.ClientCertificateData, u.ClientCertificate, u.dir)
	if err != nil {
		return nil, fmt.Errorf("%s: user: %w", c.source, err)
	}
	key, err := pemOf("client-key", u.ClientKeyData, u.ClientKey, u.dir)
	if err != nil {
		return nil, fmt.Errorf("%s: user: %w", c.source, err)
	}
	if cert != nil || key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s: user: client certificate and key: %w", c.source, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	proxy := http.ProxyFromEnvironment
	if cl.ProxyURL != "" {
		pu, err := url.Parse(cl.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("%s: cluster: proxy-url: %w", c.source, err)
		}
		proxy = http.ProxyURL(pu)
	}
	return &http.Transport{Proxy: proxy, TLSClientConfig: tc, TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second}, nil
}
