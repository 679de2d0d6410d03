package bench

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// The simulated cluster's API server: etcd and kube-apiserver (the cluster
// test's binaries) in the root namespace, the API server listening on the
// bridge's address so the nodes reach it through their links. Everyone
// speaks to it as admin (system:masters): the bench, and every node's
// reporter, whose rights in a real cluster the chart's RBAC gives.

// simAPIReadyTimeout bounds the start of etcd and of the API server.
const simAPIReadyTimeout = 2 * time.Minute

// simServiceCIDR is the API server's service range: routed nowhere.
const simServiceCIDR = "10.96.79.0/24"

// clusterBinMissing says why P11 cannot start an API server from k8sBin,
// or "".
func clusterBinMissing(k8sBin string) string {
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(k8sBin, b)); err != nil {
			return fmt.Sprintf("%s is not in %s (make deps-cluster builds it; HOLDFAST_CLUSTER_BIN names the dir)", b, k8sBin)
		}
	}
	return ""
}

// defaultClusterBin is where make deps-cluster puts the cluster's binaries.
func defaultClusterBin() string {
	if d := os.Getenv("HOLDFAST_CLUSTER_BIN"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "holdfast", "cluster", "v1.36.3", "bin")
}

type simAPI struct {
	dir        string
	url        string
	kubeconfig string // admin's
	client     *http.Client
	procs      []*agentProc
	release    chan struct{} // closed by stop: the launching thread may go
}

// launch starts a daemon from a thread of its own that stays until stop:
// a child's parent-death signal follows the thread that forked it, and a
// thread the Go runtime ends (as when an embedded containerd's locked
// thread exits) would take the API server with it between samples.
func (a *simAPI) launch(ctx context.Context, what, logBase, bin string, args ...string) (*agentProc, error) {
	if a.release == nil {
		a.release = make(chan struct{})
	}
	type started struct {
		d   *agentProc
		err error
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		d, err := startDaemon(ctx, what, logBase, bin, args...)
		ch <- started{d, err}
		if err == nil {
			<-a.release
		}
	}()
	r := <-ch
	return r.d, r.err
}

// startSimAPI writes the PKI under dir and starts etcd and kube-apiserver
// from k8sBin; recordDir's pid file gets their pids.
func startSimAPI(ctx context.Context, dir, k8sBin, recordDir string) (a *simAPI, err error) {
	a = &simAPI{dir: dir}
	defer func() {
		if err != nil {
			a.stop()
		}
	}()
	port, err := freePort()
	if err != nil {
		return a, err
	}
	a.url = "https://" + net.JoinHostPort(simBridgeAddr, strconv.Itoa(port))
	if err := a.writePKI(); err != nil {
		return a, fmt.Errorf("writing the API server's PKI: %w", err)
	}
	etcdClient, err := freePort()
	if err != nil {
		return a, err
	}
	etcdPeer, err := freePort()
	if err != nil {
		return a, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	p := a.path
	for _, c := range [][]string{
		{"etcd", "--name", "default", "--data-dir", p("etcd"),
			"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "default=" + peerURL, "--unsafe-no-fsync", "--log-level", "warn"},
		{"kube-apiserver", "--advertise-address", simBridgeAddr, "--bind-address", simBridgeAddr,
			"--secure-port", strconv.Itoa(port), "--etcd-servers", etcdURL,
			"--client-ca-file", p("ca.crt"), "--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
			"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
			"--service-cluster-ip-range", simServiceCIDR, "--authorization-mode", "RBAC",
			"--profiling=false", "--cert-dir", p("apiserver")},
	} {
		d, err := a.launch(ctx, c[0], p(c[0]), filepath.Join(k8sBin, c[0]), c[1:]...)
		if err != nil {
			return a, err
		}
		a.procs = append(a.procs, d)
		if err := recordPid(recordDir, d.cmd.Process.Pid); err != nil {
			return a, err
		}
	}
	return a, a.waitReady(ctx)
}

// waitReady waits until the API server answers /readyz with 200.
func (a *simAPI) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, simAPIReadyTimeout)
	defer cancel()
	var last error
	for {
		for _, p := range a.procs {
			if err := p.alive(); err != nil {
				return err
			}
		}
		if last = a.do(ctx, http.MethodGet, "/readyz", nil, nil); last == nil {
			return nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("kube-apiserver not ready within %s: %v%s", simAPIReadyTimeout, last, logTail(a.path("kube-apiserver.err")))
		}
	}
}

func (a *simAPI) stop() {
	for _, p := range slices.Backward(a.procs) {
		p.stop()
	}
	a.procs = nil
	if a.release != nil {
		close(a.release)
		a.release = nil
	}
}

func (a *simAPI) path(name string) string { return filepath.Join(a.dir, name) }

// do sends a JSON request as admin; a status other than 2xx is an error
// with the body. out, if not nil, gets the answer decoded.
func (a *simAPI) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{code: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, firstLineOf(string(b)))}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// apiError is an answer of the API server other than 2xx.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

// isNotFound reports whether err is the API server's 404.
func isNotFound(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.code == http.StatusNotFound
}

// applyCRDs creates the chart's CustomResourceDefinitions (helm template of
// templates/crd.yaml) and waits until each is established.
func (a *simAPI) applyCRDs(ctx context.Context, helm, chart string) ([]string, error) {
	out, err := exec.CommandContext(ctx, helm, "template", "bench", chart, "--show-only", "templates/crd.yaml").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("helm template %s: %w", chart, err)
	}
	var names []string
	for _, doc := range strings.Split(string(out), "\n---") {
		var crd map[string]any
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			return nil, fmt.Errorf("reading the chart's CRDs: %w", err)
		}
		if crd == nil {
			continue
		}
		meta, _ := crd["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		if err := a.do(ctx, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, nil); err != nil {
			return nil, fmt.Errorf("creating CRD %s: %w", name, err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		if err := a.waitEstablished(ctx, name); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func (a *simAPI) waitEstablished(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var crd struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		if err := a.do(ctx, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, &crd); err == nil {
			for _, c := range crd.Status.Conditions {
				if c.Type == "Established" && c.Status == "True" {
					return nil
				}
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("CRD %s not established within a minute", name)
		}
	}
}

// createNode creates the Node object of a simulated node.
func (a *simAPI) createNode(ctx context.Context, name, addr string, labels map[string]string) error {
	node := map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": name, "labels": labels},
		"status":   map[string]any{"addresses": []map[string]string{{"type": "InternalIP", "address": addr}}},
	}
	return a.do(ctx, http.MethodPost, "/api/v1/nodes", node, nil)
}

// writePKI writes a CA, the service-account key pair, the API server's
// serving certificate (for the bridge's address), an admin client
// certificate (system:masters) and admin's kubeconfig; the client speaks
// as admin.
func (a *simAPI) writePKI() error {
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "holdfast-bench-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := a.writePair("ca", caDER, caKey); err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := a.writePair("sa", nil, saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(a.path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	for i, c := range []x509.Certificate{
		{Subject: pkix.Name{CommonName: "kube-apiserver"}, IPAddresses: []net.IP{net.ParseIP(simBridgeAddr), net.IPv4(127, 0, 0, 1)},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{Subject: pkix.Name{CommonName: "holdfast-bench-admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		c.SerialNumber = big.NewInt(int64(i + 2))
		c.NotBefore, c.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		c.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, &c, ca, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := a.writePair([]string{"apiserver", "admin"}[i], der, key); err != nil {
			return err
		}
	}
	return a.writeAdmin(ca)
}

func (a *simAPI) writePair(name string, der []byte, key *ecdsa.PrivateKey) error {
	if der != nil {
		if err := os.WriteFile(a.path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			return err
		}
	}
	b, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(a.path(name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b}), 0o600)
}

// writeAdmin writes admin's kubeconfig and makes the client.
func (a *simAPI) writeAdmin(ca *x509.Certificate) error {
	a.kubeconfig = a.path("admin.kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: bench
  context: {cluster: bench, user: admin}
current-context: bench
`, a.url, a.path("ca.crt"), a.path("admin.crt"), a.path("admin.key"))
	if err := os.WriteFile(a.kubeconfig, []byte(cfg), 0o600); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(a.path("admin.crt"), a.path("admin.key"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	a.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
	return nil
}

// freePort returns a TCP port that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
