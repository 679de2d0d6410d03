package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pki is a CA and what it signs.
type pki struct {
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
	caPEM []byte
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return &pki{ca: ca, key: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for cn: a server's (for 127.0.0.1) or a client's.
func (p *pki) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// apiServer answers GET /api/v1/nodes in pages of one and the NodeImages
// when served, 401 while unauthorized says so, 403 to the selector
// forbidden=yes, 404 to anything else, as an API server does; and records
// who asked.
type apiServer struct {
	srv *httptest.Server

	mu           sync.Mutex
	seen         []string // "cn=…", "bearer …", "basic user:pass": who made each request
	queries      []string
	unauthorized int  // requests to answer 401
	nodeImages   bool // the NodeImages resource is served
	imageSets    bool // the ImageSet resource is served
}

func newAPIServer(t *testing.T, p *pki) *apiServer {
	t.Helper()
	a := &apiServer{}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		who := ""
		switch {
		case r.TLS != nil && len(r.TLS.PeerCertificates) > 0:
			who = "cn=" + r.TLS.PeerCertificates[0].Subject.CommonName
		case r.Header.Get("Authorization") != "":
			who = strings.ToLower(r.Header.Get("Authorization"))
			if u, pw, ok := r.BasicAuth(); ok {
				who = "basic " + u + ":" + pw
			}
		}
		a.seen = append(a.seen, who)
		a.queries = append(a.queries, r.URL.RawQuery)
		unauth := a.unauthorized > 0
		if unauth {
			a.unauthorized--
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case unauth:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","message":"Unauthorized","code":401}`))
		case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("labelSelector") == "forbidden=yes":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","message":"nodes is forbidden: User \"x\" cannot list resource \"nodes\"","code":403}`))
		case r.URL.Path == "/api/v1/nodes" && r.Header.Get("Accept") == "application/json":
			cont := r.URL.Query().Get("continue")
			switch cont {
			case "":
				_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{"continue":"page2"},"items":[{"metadata":{"name":"node-1"}}]}`))
			case "page2":
				_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{"continue":"page3"},"items":[{"metadata":{"name":"node-2"}}]}`))
			default:
				_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"node-3"}}]}`))
			}
		case r.URL.Path == "/apis/holdfast.io/v1alpha1/nodeimages" && r.URL.Query().Get("labelSelector") == "" && a.nodeImages:
			_, _ = w.Write([]byte(`{"kind":"NodeImagesList","apiVersion":"holdfast.io/v1alpha1","metadata":{},"items":[` +
				`{"apiVersion":"holdfast.io/v1alpha1","kind":"NodeImages","metadata":{"name":"node-1"},"images":2,"held":"aGVsZA=="},` +
				`{"apiVersion":"holdfast.io/v1alpha1","kind":"NodeImages","metadata":{"name":"node-2"},"held":"not base64!"}]}`))
		case r.URL.Path == "/apis/holdfast.io/v1alpha1/imagesets" && a.imageSets:
			_, _ = w.Write([]byte(`{"kind":"ImageSetList","apiVersion":"holdfast.io/v1alpha1","metadata":{},"items":[` +
				`{"apiVersion":"holdfast.io/v1alpha1","kind":"ImageSet","metadata":{"name":"release-7","generation":3},"spec":{"images":["a:1","b:1"]},` +
				`"status":{"conditions":[{"type":"Staged","status":"False","reason":"ImagesMissing","observedGeneration":2}],"nodes":{"selected":4,"staged":3,"failed":1}}},` +
				`{"apiVersion":"holdfast.io/v1alpha1","kind":"ImageSet","metadata":{"name":"broken"},"spec":{"images":"a:1"}}]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","message":"the server could not find the requested resource","code":404}`))
		}
	}))
	cert, key := p.issue(t, "127.0.0.1", true)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	a.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

func (a *apiServer) who() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// names lists the nodes through c.
func names(t *testing.T, c *Client) []string {
	t.Helper()
	nodes, err := c.Nodes(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func kubeconfigText(server, current string, contexts map[string][2]string, clusterExtra, users string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\n")
	if current != "" {
		fmt.Fprintf(&b, "current-context: %s\n", current)
	}
	fmt.Fprintf(&b, "clusters:\n- name: test\n  cluster:\n    server: %s\n%s", server, clusterExtra)
	b.WriteString("contexts:\n")
	for name, cu := range contexts {
		fmt.Fprintf(&b, "- name: %s\n  context: {cluster: %s, user: %s}\n", name, cu[0], cu[1])
	}
	b.WriteString("users:\n" + users)
	return b.String()
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestClientCertificates: a client certificate from inline data and from
// files named relative to the kubeconfig; the server sees its CN; every
// page of a list comes, in order, with limit and continue (and client-go's
// timeout).
func TestClientCertificates(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	cert, key := p.issue(t, "admin", false)
	dir := t.TempDir()
	inline := writeFile(t, filepath.Join(dir, "inline"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority-data: "+b64(p.caPEM)+"\n",
		"- name: u\n  user:\n    client-certificate-data: "+b64(cert)+"\n    client-key-data: "+b64(key)+"\n"))
	writeFile(t, filepath.Join(dir, "pki", "ca.crt"), string(p.caPEM))
	writeFile(t, filepath.Join(dir, "pki", "admin.crt"), string(cert))
	writeFile(t, filepath.Join(dir, "pki", "admin.key"), string(key))
	files := writeFile(t, filepath.Join(dir, "files"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority: pki/ca.crt\n",
		"- name: u\n  user:\n    client-certificate: pki/admin.crt\n    client-key: pki/admin.key\n"))
	for _, kc := range []string{inline, files} {
		c, err := Connect(Options{Kubeconfig: kc, UserAgent: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(names(t, c), ","); got != "node-1,node-2,node-3" {
			t.Errorf("%s: nodes %s", kc, got)
		}
		if who := a.who(); who[len(who)-1] != "cn=admin" {
			t.Errorf("%s: the server saw %v", kc, who)
		}
		if !strings.Contains(c.Source(), kc) {
			t.Errorf("source %q does not name %s", c.Source(), kc)
		}
	}
	a.mu.Lock()
	q := a.queries
	a.mu.Unlock()
	if len(q) != 6 || q[0] != "limit=500&timeout=30s" || q[1] != "continue=page2&limit=500&timeout=30s" || q[2] != "continue=page3&limit=500&timeout=30s" {
		t.Errorf("queries %q", q)
	}
}

// TestTokens: a token, a tokenFile (read again after it changed: by a
// client made then; client-go's own client reads it again each minute),
// basic auth.
func TestTokens(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	dir := t.TempDir()
	tokenFile := writeFile(t, filepath.Join(dir, "token"), "first\n")
	kc := writeFile(t, filepath.Join(dir, "config"), kubeconfigText(a.srv.URL, "tok",
		map[string][2]string{"tok": {"test", "tok"}, "file": {"test", "file"}, "both": {"test", "both"}, "basic": {"test", "basic"}},
		"    certificate-authority-data: "+b64(p.caPEM)+"\n",
		"- name: tok\n  user: {token: abc}\n- name: file\n  user: {tokenFile: token}\n- name: both\n  user: {token: abc, tokenFile: token}\n- name: basic\n  user: {username: ann, password: pw}\n"))
	get := func(ctx string) string {
		t.Helper()
		c, err := Connect(Options{Kubeconfig: kc, Context: ctx})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Nodes(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		who := a.who()
		return who[len(who)-1]
	}
	if w := get(""); w != "bearer abc" {
		t.Errorf("token: %q", w)
	}
	if w := get("file"); w != "bearer first" {
		t.Errorf("tokenFile: %q", w)
	}
	if w := get("both"); w != "bearer first" {
		t.Errorf("token and tokenFile: %q, want the file's", w)
	}
	writeFile(t, tokenFile, "second")
	if w := get("file"); w != "bearer second" {
		t.Errorf("tokenFile after it changed: %q", w)
	}
	if w := get("basic"); w != "basic ann:pw" {
		t.Errorf("basic: %q", w)
	}
}

// TestExecPlugin: the plugin's token reaches the server; it runs once for
// two requests, and again after a 401.
func TestExecPlugin(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	plugin := writeFile(t, filepath.Join(dir, "plugin.sh"), `#!/bin/sh
echo run >> "`+runs+`"
case "$KUBERNETES_EXEC_INFO" in *'"interactive":false'*) ;; *) echo "no exec info" >&2; exit 1;; esac
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"'"$TOKEN_PREFIX"'-from-plugin"}}'
`)
	if err := os.Chmod(plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	kc := writeFile(t, filepath.Join(dir, "config"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority-data: "+b64(p.caPEM)+"\n",
		"- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./plugin.sh\n      interactiveMode: Never\n      env: [{name: TOKEN_PREFIX, value: tok}]\n"))
	c, err := Connect(Options{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := c.Nodes(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run")
	}
	if who := a.who(); count() != 1 || who[len(who)-1] != "bearer tok-from-plugin" {
		t.Fatalf("plugin ran %d times, the server saw %v", count(), who)
	}
	a.mu.Lock()
	a.unauthorized = 1
	a.mu.Unlock()
	if _, err := c.Nodes(ctx, ""); err != nil {
		t.Fatalf("after a 401: %v", err)
	}
	if count() != 2 {
		t.Errorf("plugin ran %d times after a 401, want 2", count())
	}
}

// TestKubeconfigMerge: $KUBECONFIG's files merge: the first to name a
// context, cluster or user wins, and the first current-context; a missing
// file is skipped. --context picks another; an unknown one names those there.
func TestKubeconfigMerge(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	dir := t.TempDir()
	ca := "    certificate-authority-data: " + b64(p.caPEM) + "\n"
	first := writeFile(t, filepath.Join(dir, "first"), kubeconfigText(a.srv.URL, "", map[string][2]string{"one": {"test", "u1"}}, ca,
		"- name: u1\n  user: {token: from-first}\n"))
	second := writeFile(t, filepath.Join(dir, "second"), kubeconfigText("https://192.0.2.1:6443", "one", map[string][2]string{"two": {"test", "u2"}}, ca,
		"- name: u1\n  user: {token: from-second}\n- name: u2\n  user: {token: two}\n"))
	t.Setenv("KUBECONFIG", strings.Join([]string{filepath.Join(dir, "missing"), first, second}, string(os.PathListSeparator)))
	c, err := Connect(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if who := a.who(); c.Server() != a.srv.URL || who[len(who)-1] != "bearer from-first" {
		t.Errorf("server %s, token %v: want the first file's cluster and user", c.Server(), who)
	}
	c, err = Connect(Options{Context: "two"})
	if err != nil || c.Server() != a.srv.URL {
		t.Fatalf("context two: %v", err)
	}
	if _, err := c.Nodes(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if who := a.who(); who[len(who)-1] != "bearer two" {
		t.Errorf("context two: %v", who)
	}
	_, err = Connect(Options{Context: "three"})
	if err == nil || !strings.Contains(err.Error(), `context "three" not found (contexts: one, two)`) {
		t.Errorf("unknown context: %v", err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "missing"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := Connect(Options{Home: dir}); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("nothing to read: %v", err)
	}
	if _, err := Connect(Options{Kubeconfig: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a --kubeconfig that is not there: %v", err)
	}
}

// TestInCluster: with no kubeconfig, a pod's service account: its token
// and CA.
func TestInCluster(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	sa := t.TempDir()
	writeFile(t, filepath.Join(sa, "token"), "sa-token")
	writeFile(t, filepath.Join(sa, "ca.crt"), string(p.caPEM))
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(a.srv.URL, "https://"))
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	c, err := Connect(Options{Home: t.TempDir(), InCluster: sa})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(t, c), ","); got != "node-1,node-2,node-3" || !strings.Contains(c.Source(), "service account") {
		t.Errorf("nodes %s, source %s", got, c.Source())
	}
	if who := a.who(); who[len(who)-1] != "bearer sa-token" {
		t.Errorf("the server saw %v", who)
	}
}

// TestErrors: a 404 is IsNotFound with the server's message; a 403 names
// the reason; a server whose certificate the CA did not sign is refused;
// an auth-provider is refused with a clear message.
func TestErrors(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	dir := t.TempDir()
	kc := writeFile(t, filepath.Join(dir, "config"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority-data: "+b64(p.caPEM)+"\n", "- name: u\n  user: {token: t}\n"))
	c, err := Connect(Options{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err = c.NodeImages(ctx)
	if !IsNotFound(err) || !strings.Contains(err.Error(), "could not find the requested resource") {
		t.Errorf("404: %v", err)
	}
	if _, err := c.Nodes(ctx, "forbidden=yes"); IsNotFound(err) || !strings.Contains(err.Error(), "403 Forbidden: nodes is forbidden") {
		t.Errorf("403: %v", err)
	}
	other := newPKI(t)
	kc2 := writeFile(t, filepath.Join(dir, "other-ca"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority-data: "+b64(other.caPEM)+"\n", "- name: u\n  user: {token: t}\n"))
	c, err = Connect(Options{Kubeconfig: kc2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes(ctx, ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server the CA did not sign: %v", err)
	}
	kc3 := writeFile(t, filepath.Join(dir, "provider"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}}, "",
		"- name: u\n  user:\n    auth-provider: {name: gcp}\n"))
	if _, err := Connect(Options{Kubeconfig: kc3}); err == nil || !strings.Contains(err.Error(), "auth-provider is not supported") {
		t.Errorf("auth-provider: %v", err)
	}
	kc4 := writeFile(t, filepath.Join(dir, "badkey"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}}, "",
		"- name: u\n  user: {client-certificate: nope.crt, client-key: nope.key}\n"))
	if _, err := Connect(Options{Kubeconfig: kc4}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "nope.crt")) {
		t.Errorf("a client certificate that is not there: %v", err)
	}
	bad := writeFile(t, filepath.Join(dir, "bad"), "clusters: [\n")
	if _, err := Connect(Options{Kubeconfig: bad}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a kubeconfig that does not parse: %v", err)
	}
}

// TestLists: a label selector reaches the server; the NodeImages objects
// decode into their type, and one that does not is said and left out.
func TestLists(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	dir := t.TempDir()
	kc := writeFile(t, filepath.Join(dir, "config"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority-data: "+b64(p.caPEM)+"\n", "- name: u\n  user: {token: t}\n"))
	c, err := Connect(Options{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Nodes(context.Background(), "pool=gpu")
	a.mu.Lock()
	q := a.queries
	a.nodeImages = true
	a.mu.Unlock()
	if err != nil || len(q) != 3 || q[0] != "labelSelector=pool%3Dgpu&limit=500&timeout=30s" {
		t.Errorf("selector: %v, queries %q", err, q)
	}
	list, bad, err := c.NodeImages(context.Background())
	if err != nil || len(list) != 1 || list[0].Metadata.Name != "node-1" || list[0].Images != 2 || string(list[0].Held) != "held" ||
		len(bad) != 1 || !strings.HasPrefix(bad[0].Error(), "NodeImages node-2: ") {
		t.Errorf("NodeImages: %v, %+v, bad %v", err, list, bad)
	}
}

// TestImageSets: a cluster without the ImageSet resource has none, and no
// error; the objects decode into their type, spec and status, and one that
// does not is named and left out.
func TestImageSets(t *testing.T) {
	p := newPKI(t)
	a := newAPIServer(t, p)
	kc := writeFile(t, filepath.Join(t.TempDir(), "config"), kubeconfigText(a.srv.URL, "c", map[string][2]string{"c": {"test", "u"}},
		"    certificate-authority-data: "+b64(p.caPEM)+"\n", "- name: u\n  user: {token: t}\n"))
	c, err := Connect(Options{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if sets, bad, err := c.ImageSets(ctx); err != nil || sets != nil || bad != nil {
		t.Errorf("not served: %v, %+v, %v; want none and no error", err, sets, bad)
	}
	a.mu.Lock()
	a.imageSets = true
	a.mu.Unlock()
	sets, bad, err := c.ImageSets(ctx)
	if err != nil || len(sets) != 1 || len(bad) != 1 || !strings.HasPrefix(bad[0].Error(), "ImageSet broken: ") {
		t.Fatalf("served: %v, %+v, bad %v", err, sets, bad)
	}
	s := sets[0]
	if s.Metadata.Name != "release-7" || s.Metadata.Generation != 3 || len(s.Spec.Images) != 2 || s.Status.Nodes.Failed != 1 ||
		len(s.Status.Conditions) != 1 || s.Status.Conditions[0].ObservedGeneration != 2 {
		t.Errorf("release-7: %+v", s)
	}
}

// TestReadPage: a page's items come in order whatever the order of its
// fields, with its continue and resourceVersion; null items are none, and a page cut short or of another shape is
// an error saying where.
func TestReadPage(t *testing.T) {
	read := func(body string) ([]string, string, error) {
		var items []string
		meta, err := ReadPage(strings.NewReader(body), func(item []byte) error {
			items = append(items, string(item))
			return nil
		})
		return items, meta.Continue, err
	}
	var got string
	meta, err := ReadPage(strings.NewReader(`{"kind":"L","items":[{"a":1},{"b":[2]}],"metadata":{"continue":"next","resourceVersion":"7"}}`),
		func(item []byte) error { got += string(item); return nil })
	if err != nil || meta.Continue != "next" || meta.ResourceVersion != "7" || got != `{"a":1}{"b":[2]}` {
		t.Errorf("page: %v, %+v, %q", err, meta, got)
	}
	if items, cont, err := read(`{"metadata":{},"items":null}`); err != nil || cont != "" || len(items) != 0 {
		t.Errorf("null items: %v, %q, %q", err, cont, items)
	}
	for body, want := range map[string]string{
		`{"items":[{"a":1},{"b"`: "reading item 1 of the list",
		`{"items":{"a":1}}`:      "not an array",
		`[1]`:                    "where { belongs",
		``:                       "reading the list: EOF",
	} {
		if _, _, err := read(body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", body, err, want)
		}
	}
}
