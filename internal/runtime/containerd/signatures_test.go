package containerd

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// testRegistry is go-containerregistry's registry behind a handler that
// may ask for basic credentials and may answer the referrers API itself,
// and that notes every request's path and query.
type testRegistry struct {
	host string
	mu   sync.Mutex
	seen []string
}

func newTestRegistry(t *testing.T, api, auth bool, referrers http.HandlerFunc) *testRegistry {
	t.Helper()
	reg := ggcrregistry.New(ggcrregistry.WithReferrersSupport(api), ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	r := &testRegistry{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.URL.RequestURI())
		r.mu.Unlock()
		if u, p, ok := req.BasicAuth(); auth && (!ok || u != "puller" || p != "secret") {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if referrers != nil && strings.Contains(req.URL.Path, "/referrers/") {
			referrers(w, req)
			return
		}
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// pushReferrer pushes to repo (in r) a bundle referrer of image, and
// returns its descriptor.
func (r *testRegistry) pushReferrer(t *testing.T, repo string, image ocispec.Descriptor) ocispec.Descriptor {
	t.Helper()
	blobs := sigtest.Blobs{}
	d := blobs.Referrer(t, image, sigtest.KeyBundle(t, sigtest.NewKey(t), sigtest.Statement(t, image.Digest)))
	auth := remote.WithAuth(&authn.Basic{Username: "puller", Password: "secret"})
	if err := blobs.Push(r.host+"/"+repo+"@"+d.Digest.String(), d, auth); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSignatureReferrersThroughMirrors: an image's referrers are listed
// through the hosts.toml mirror first, then the registry with its
// credentials: the mirror's fallback tag and the registry's referrers API
// both count. A mirror whose referrers API answers garbage is passed over,
// said at debug level, and costs nothing else.
func TestSignatureReferrersThroughMirrors(t *testing.T) {
	upstream := newTestRegistry(t, true, true, nil)
	// The mirror has no referrers API: it answers pushes that ask with
	// 404, so that the client writes the fallback tag, and pulls (which
	// name the registry they mirror) with garbage.
	mirror := newTestRegistry(t, false, false, func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("ns") == "" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", ocispec.MediaTypeImageIndex)
		_, _ = w.Write([]byte("{not an index"))
	})
	image := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("image"), Size: 100}
	fromAPI := upstream.pushReferrer(t, "team/app", image)
	fromTag := mirror.pushReferrer(t, "team/app", image)

	hostsDir := t.TempDir()
	toml := "server = \"http://" + upstream.host + "\"\n\n[host.\"http://" + mirror.host + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
	if err := os.MkdirAll(filepath.Join(hostsDir, upstream.host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostsDir, upstream.host, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	creds := func(host string) (string, string, error) {
		if host == upstream.host {
			return "puller", "secret", nil
		}
		return "", "", nil
	}
	var logged bytes.Buffer
	reg := registry{
		hosts: config.ConfigureHosts(ctx, config.HostOptions{HostDir: config.HostDirFromRoot(hostsDir), Credentials: creds}),
		log:   slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	reg.resolver = docker.NewResolver(docker.ResolverOptions{Hosts: reg.hosts})
	var err error
	if reg.repo, err = reference.ParseNormalizedNamed(upstream.host + "/team/app:1"); err != nil {
		t.Fatal(err)
	}

	var got []digest.Digest
	for _, d := range reg.signatureReferrers(ctx, image.Digest) {
		got = append(got, d.Digest)
	}
	slices.Sort(got)
	want := []digest.Digest{fromAPI.Digest, fromTag.Digest}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("referrers listed: %v, want the registry's by its API %s and the mirror's by its fallback tag %s\nlog:\n%s", got, fromAPI.Digest, fromTag.Digest, logged.String())
	}
	apiPath := "/v2/team/app/referrers/" + image.Digest.String()
	if !slices.Contains(mirror.seen, apiPath+"?ns="+url.QueryEscape(upstream.host)) {
		t.Errorf("the mirror was not asked for the referrers (%s?ns=%s): %v", apiPath, upstream.host, mirror.seen)
	}
	if !strings.Contains(logged.String(), "referrers API answer not taken") || !strings.Contains(logged.String(), mirror.host) {
		t.Errorf("the mirror's broken answer is not logged at debug level, naming the mirror:\n%s", logged.String())
	}
}
