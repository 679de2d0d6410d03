package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcrlayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// registry is a registry in this process, on 127.0.0.1, with the OCI 1.1
// referrers API: cosign signs an image in a registry, so the image goes
// there, cosign pushes its signatures beside it as referrers, and they are
// copied back into the layout. It holds one repository.
type registry struct {
	srv  *http.Server
	repo name.Repository
	// auth is the one credential the registry takes (a random password):
	// another local user who finds its port can neither read it nor push
	// to it, so the referrers copied back into the release are what this
	// process and its cosign pushed.
	auth *authn.Basic
	opts []remote.Option
}

// startRegistry starts the registry on a free port of 127.0.0.1.
func startRegistry() (*registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		ln.Close()
		return nil, err
	}
	auth := &authn.Basic{Username: "holdfast-release", Password: hex.EncodeToString(secret)}
	h := ggcrregistry.New(ggcrregistry.WithReferrersSupport(true), ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	r := &registry{srv: &http.Server{Handler: onlyWith(auth, h), ReadHeaderTimeout: time.Minute}, auth: auth,
		opts: []remote.Option{remote.WithAuth(auth)}}
	if r.repo, err = name.NewRepository(ln.Addr().String()+"/holdfast", name.Insecure); err != nil {
		ln.Close()
		return nil, err
	}
	go r.srv.Serve(ln) //nolint:errcheck // ends with Close
	return r, nil
}

func (r *registry) close() { r.srv.Close() }

// onlyWith serves h to the requests that carry auth's credentials; any
// other is 401, asking for them.
func onlyWith(auth *authn.Basic, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(auth.Username)) != 1 ||
			subtle.ConstantTimeCompare([]byte(pass), []byte(auth.Password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="holdfast release"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// dockerConfig writes, into dir, a Docker config.json holding the
// registry's credential, for cosign (DOCKER_CONFIG=dir), readable by its
// owner only.
func (r *registry) dockerConfig(dir string) error {
	cred := base64.StdEncoding.EncodeToString([]byte(r.auth.Username + ":" + r.auth.Password))
	b, err := json.Marshal(map[string]any{"auths": map[string]any{r.repo.RegistryStr(): map[string]string{"auth": cred}}})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// ref is repo@d.
func (r *registry) ref(d digest.Digest) string { return r.repo.Digest(d.String()).String() }

// pushImage pushes the layout's image (its index, manifests and blobs)
// as the layout holds it: the same digests.
func (r *registry) pushImage(l *layout) error {
	top, err := ggcrlayout.ImageIndexFromPath(l.dir)
	if err != nil {
		return err
	}
	h, err := v1.NewHash(l.index.Digest.String())
	if err != nil {
		return err
	}
	idx, err := top.ImageIndex(h)
	if err != nil {
		return fmt.Errorf("reading the image %s: %w", l.index.Digest, err)
	}
	if err := remote.WriteIndex(r.repo.Digest(h.String()), idx, r.opts...); err != nil {
		return fmt.Errorf("pushing the image %s: %w", l.index.Digest, err)
	}
	return nil
}

// rawManifest is a manifest's bytes, for remote.Put.
type rawManifest struct {
	b  []byte
	mt string
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.b, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.MediaType(m.mt), nil }

// pushManifest pushes the layout's manifest d and its config and layers.
func (r *registry) pushManifest(l *layout, d ocispec.Descriptor) error {
	raw, err := l.readBlob(d.Digest)
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	for _, b := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		content, err := l.readBlob(b.Digest)
		if err != nil {
			return err
		}
		if err := remote.WriteLayer(r.repo, static.NewLayer(content, types.MediaType(b.MediaType)), r.opts...); err != nil {
			return fmt.Errorf("pushing blob %s: %w", b.Digest, err)
		}
	}
	if err := remote.Put(r.repo.Digest(d.Digest.String()), rawManifest{raw, d.MediaType}, r.opts...); err != nil {
		return fmt.Errorf("pushing manifest %s: %w", d.Digest, err)
	}
	return nil
}

// maxReferrerBlob bounds a referrer's manifest and blobs copied back: a
// signature bundle or an SBOM.
const maxReferrerBlob = 64 << 20

// pullReferrers copies into the layout every referrer the registry holds
// of subjects, and of those referrers in turn (the signature of a
// referrer), with their blobs, and lists each in index.json with its
// subject. It returns how many it found.
func (r *registry) pullReferrers(ctx context.Context, l *layout, subjects []digest.Digest) (int, error) {
	seen := map[digest.Digest]bool{}
	n := 0
	for len(subjects) > 0 {
		s := subjects[0]
		subjects = subjects[1:]
		idx, err := remote.Referrers(r.repo.Digest(s.String()), append(r.opts, remote.WithContext(ctx))...)
		if err != nil {
			return n, fmt.Errorf("the referrers of %s: %w", s, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return n, fmt.Errorf("the referrers of %s: %w", s, err)
		}
		for _, d := range im.Manifests {
			dg := digest.Digest(d.Digest.String())
			if seen[dg] {
				continue
			}
			seen[dg] = true
			desc, err := r.pullManifest(ctx, l, dg)
			if err != nil {
				return n, err
			}
			l.addReferrer(desc, s)
			n++
			subjects = append(subjects, dg)
		}
	}
	return n, nil
}

// pullManifest copies the manifest d and its config and layers from the
// registry into the layout, and describes it.
func (r *registry) pullManifest(ctx context.Context, l *layout, d digest.Digest) (ocispec.Descriptor, error) {
	got, err := remote.Get(r.repo.Digest(d.String()), append(r.opts, remote.WithContext(ctx))...)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("referrer %s: %w", d, err)
	}
	if len(got.Manifest) > maxReferrerBlob {
		return ocispec.Descriptor{}, fmt.Errorf("referrer %s: %d bytes", d, len(got.Manifest))
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(got.Manifest, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("referrer %s: %w", d, err)
	}
	for _, b := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if b.Size > maxReferrerBlob {
			return ocispec.Descriptor{}, fmt.Errorf("referrer %s: blob %s of %d bytes", d, b.Digest, b.Size)
		}
		layer, err := remote.Layer(r.repo.Digest(b.Digest.String()), append(r.opts, remote.WithContext(ctx))...)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("referrer %s: blob %s: %w", d, b.Digest, err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("referrer %s: blob %s: %w", d, b.Digest, err)
		}
		err = l.writeBlob(b.Digest, io.LimitReader(rc, maxReferrerBlob+1))
		rc.Close()
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("referrer %s: %w", d, err)
		}
	}
	if err := l.writeBlob(d, bytes.NewReader(got.Manifest)); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("referrer %s: %w", d, err)
	}
	return ocispec.Descriptor{MediaType: m.MediaType, Digest: d, Size: int64(len(got.Manifest)), ArtifactType: oci.ArtifactType(m)}, nil
}
