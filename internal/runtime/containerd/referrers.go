package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	ctrref "github.com/containerd/containerd/v2/pkg/reference"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// referrersAPI asks the registry's hosts in order (mirrors and peers first,
// as a pull does, then the registry itself) for the referrers of image by
// the OCI 1.1 referrers API (GET /v2/<repo>/referrers/<digest>) and
// returns the first list one of them gives. A host without the API answers
// 404, as one without referrers for the image may: none is no error. The
// errors of the hosts that answered otherwise come back joined beside what
// a later host gave. Only the first page of a long answer is read.
func (reg registry) referrersAPI(ctx context.Context, image digest.Digest) ([]ocispec.Descriptor, error) {
	domain := reference.Domain(reg.repo)
	hosts, err := reg.hosts(domain)
	if err != nil {
		return nil, err
	}
	ctx, err = docker.ContextWithRepositoryScope(ctx, ctrref.Spec{Locator: reg.repo.Name()}, false)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, h := range hosts {
		if h.Capabilities&(docker.HostCapabilityResolve|docker.HostCapabilityReferrers) == 0 {
			continue
		}
		list, err := askReferrers(ctx, h, domain, reference.Path(reg.repo), image)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.Host, err))
			continue
		}
		if list != nil {
			return list, errors.Join(errs...)
		}
	}
	return nil, errors.Join(errs...)
}

// askReferrers asks one host for the referrers of image in the repository
// repoPath of the registry domain, with the host's credentials: nil, nil
// when it has none to give (404).
func askReferrers(ctx context.Context, h docker.RegistryHost, domain, repoPath string, image digest.Digest) ([]ocispec.Descriptor, error) {
	u := url.URL{Scheme: h.Scheme, Host: h.Host, Path: path.Join("/", h.Path, repoPath, "referrers", image.String())}
	if h.Host != domain && (domain != "docker.io" || h.Host != "registry-1.docker.io") {
		u.RawQuery = url.Values{"ns": {domain}}.Encode()
	}
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	var resp *http.Response
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header = h.Header.Clone()
		if req.Header == nil {
			req.Header = http.Header{}
		}
		req.Header.Set("Accept", ocispec.MediaTypeImageIndex)
		if h.Authorizer != nil {
			if err := h.Authorizer.Authorize(ctx, req); err != nil {
				return nil, err
			}
		}
		if resp, err = client.Do(req); err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusUnauthorized || h.Authorizer == nil || try > 0 {
			break
		}
		// The host asks for credentials: the authorizer reads how, and the
		// request goes again once with them.
		err = h.Authorizer.AddResponses(ctx, []*http.Response{resp})
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("referrers of %s: %s", image, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReferrersList+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxReferrersList {
		return nil, fmt.Errorf("referrers of %s: an answer of more than %d bytes", image, maxReferrersList)
	}
	list, err := decodeReferrers(data)
	if list == nil && err == nil {
		list = []ocispec.Descriptor{}
	}
	return list, err
}
