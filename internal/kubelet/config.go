// Package kubelet reads what holdfast needs of a kubelet's configuration:
// whether the kubelet verifies the pull credentials of an image that is on
// the node but that it did not pull itself (KEP-2535: the feature gate
// KubeletEnsureSecretPulledImages, on by default since Kubernetes 1.35, and
// imagePullCredentialsVerificationPolicy). When it does, it pulls again, or
// refuses, an image holdfast imported: ForcedPull says which of a
// workload's images, and why.
package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/lineerr"
	"github.com/holdfast-project/holdfast/internal/units"
)

// The values of imagePullCredentialsVerificationPolicy.
const (
	NeverVerify                  = "NeverVerify"
	NeverVerifyPreloadedImages   = "NeverVerifyPreloadedImages" // the kubelet's default
	NeverVerifyAllowlistedImages = "NeverVerifyAllowlistedImages"
	AlwaysVerify                 = "AlwaysVerify"
)

// Config is what holdfast reads of a kubelet's configuration.
type Config struct {
	// Files are the files read, in the order the kubelet merges them.
	Files []string `json:"files"`
	// Policy is imagePullCredentialsVerificationPolicy as the files leave
	// it, the kubelet's default when none sets it; PolicyFrom is the file
	// that set it ("" for the default).
	Policy     string `json:"imagePullCredentialsVerificationPolicy"`
	PolicyFrom string `json:"policyFrom,omitempty"`
	// Allowlist is preloadedImagesVerificationAllowlist.
	Allowlist []string `json:"preloadedImagesVerificationAllowlist,omitempty"`
	// Verifies is the feature gate KubeletEnsureSecretPulledImages: on
	// unless featureGates turns it off.
	Verifies bool `json:"ensureSecretPulledImages"`
}

// Where the kubelet's configuration is, as distributions write it, in the
// order Find tries them: K3s and RKE2 run the kubelet with --config-dir on a
// directory of drop-ins of their own (00-k3s-defaults.conf,
// 00-rke2-defaults.conf; a file given to them with kubelet-arg config= is
// copied there too); kubeadm writes one file and runs it with --config.
var defaultPaths = []string{
	"/var/lib/rancher/k3s/agent/etc/kubelet.conf.d",
	"/var/lib/rancher/rke2/agent/etc/kubelet.conf.d",
	"/var/lib/kubelet/config.yaml",
}

// Find returns the first of the distributions' kubelet configurations that
// exists under root ("/" on the node), or nil.
func Find(root string) []string {
	for _, p := range defaultPaths {
		p = filepath.Join(root, p)
		if _, err := os.Stat(p); err == nil {
			return []string{p}
		}
	}
	return nil
}

// Load reads the kubelet configuration of paths, merged in order as the
// kubelet merges its --config file and the drop-ins of its --config-dir: a
// file is read as it is, a directory for its *.conf files (in lexical
// order, subdirectories included). A file that does not parse, is not a
// KubeletConfiguration, or holds what the kubelet refuses is an error naming
// it.
func Load(paths []string) (*Config, error) {
	merged := map[string]any{}
	from := map[string]string{} // the file that last set each field
	c := &Config{}
	for _, p := range paths {
		files, err := configFiles(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			doc, err := readFile(f)
			if err != nil {
				return nil, err
			}
			for _, k := range []string{"imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist", "featureGates"} {
				if _, ok := doc[k]; ok {
					from[k] = f
				}
			}
			merged = mergePatch(merged, doc).(map[string]any)
			c.Files = append(c.Files, f)
		}
	}
	return c, c.set(merged, from)
}

// configFiles are the files path stands for: itself, or a directory's
// *.conf files.
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(p) == ".conf" {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration: reading %s: %w", path, err)
	}
	return files, nil
}

// MaxFileBytes bounds one file of the kubelet's configuration
// (docs/security.md): a KubeletConfiguration is a few KiB.
const MaxFileBytes = 1 << 20

// readFile reads one KubeletConfiguration file, YAML or JSON: a regular file
// of at most MaxFileBytes (files.ReadFile), so that a drop-in that is a
// named pipe, a device or a huge file is refused at once rather than waited
// on or read without end.
func readFile(name string) (map[string]any, error) {
	data, err := files.ReadFile(name, MaxFileBytes)
	if errors.Is(err, files.ErrTooLarge) {
		return nil, fmt.Errorf("kubelet configuration %s: larger than %s, more than a kubelet configuration may have", name, units.Whole(MaxFileBytes))
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration %s: %w", name, lineerr.Cause(err))
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("kubelet configuration %s: %w", name, err)
	}
	kind, _ := doc["kind"].(string)
	apiVersion, _ := doc["apiVersion"].(string)
	if group, _, _ := strings.Cut(apiVersion, "/"); kind != "KubeletConfiguration" || group != "kubelet.config.k8s.io" {
		return nil, fmt.Errorf("kubelet configuration %s: not a KubeletConfiguration (apiVersion %q, kind %q), which the kubelet refuses", name, apiVersion, kind)
	}
	return doc, nil
}

// mergePatch applies patch to doc as a JSON merge patch (RFC 7386), as the
// kubelet applies each drop-in.
func mergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = mergePatch(d[k], v)
	}
	return d
}

// set takes the fields from the merged configuration, and refuses what the
// kubelet refuses to start with.
func (c *Config) set(merged map[string]any, from map[string]string) error {
	bad := func(field string, err error) error {
		return fmt.Errorf("kubelet configuration %s: %s: %w", from[field], field, err)
	}
	c.Verifies = true
	if fg, ok := merged["featureGates"]; ok {
		gates, ok := fg.(map[string]any)
		if !ok {
			return bad("featureGates", errors.New("not a map of gates"))
		}
		if v, ok := gates["KubeletEnsureSecretPulledImages"]; ok {
			on, ok := v.(bool)
			if !ok {
				return bad("featureGates", fmt.Errorf("KubeletEnsureSecretPulledImages: %v is not true or false", v))
			}
			c.Verifies = on
		}
	}
	c.Policy, c.PolicyFrom = NeverVerifyPreloadedImages, ""
	if v, ok := merged["imagePullCredentialsVerificationPolicy"]; ok {
		s, _ := v.(string)
		switch s {
		case NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify:
		default:
			return bad("imagePullCredentialsVerificationPolicy", fmt.Errorf("%v is none of %s, %s, %s, %s, and the kubelet refuses it", v,
				NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify))
		}
		if !c.Verifies {
			return bad("imagePullCredentialsVerificationPolicy", errors.New("set with the feature gate KubeletEnsureSecretPulledImages off, which the kubelet refuses"))
		}
		c.Policy, c.PolicyFrom = s, from["imagePullCredentialsVerificationPolicy"]
	}
	if v, ok := merged["preloadedImagesVerificationAllowlist"]; ok {
		list, ok := v.([]any)
		if !ok {
			return bad("preloadedImagesVerificationAllowlist", errors.New("not a list"))
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return bad("preloadedImagesVerificationAllowlist", fmt.Errorf("%v is not a string", e))
			}
			if err := checkPattern(s); err != nil {
				return bad("preloadedImagesVerificationAllowlist", err)
			}
			c.Allowlist = append(c.Allowlist, s)
		}
		if len(c.Allowlist) > 0 && c.Policy != NeverVerifyAllowlistedImages {
			return bad("preloadedImagesVerificationAllowlist", fmt.Errorf("set with imagePullCredentialsVerificationPolicy %s, not %s, which the kubelet refuses", c.Policy, NeverVerifyAllowlistedImages))
		}
	}
	return nil
}

// checkPattern says whether the kubelet takes an allowlist pattern: an
// image name without tag or digest, or a prefix of whole path segments
// ending in /* (registry.example.com/*, registry.example.com/team/*).
func checkPattern(p string) error {
	if p != strings.TrimSpace(p) {
		return fmt.Errorf("%q: spaces around it, which the kubelet refuses", p)
	}
	if prefix, ok := strings.CutSuffix(p, "/*"); ok {
		if prefix == "" || strings.Contains(prefix, "*") {
			return fmt.Errorf("%q: a wildcard pattern is a registry and path followed by /*", p)
		}
		return nil
	}
	if strings.Contains(p, "*") {
		return fmt.Errorf("%q: a wildcard may only end the pattern, as /*", p)
	}
	r, err := reference.Parse(p)
	if err != nil {
		return fmt.Errorf("%q: %w", p, err)
	}
	if n, ok := r.(reference.Named); !ok || n.Name() != p {
		return fmt.Errorf("%q: an image name without tag or digest", p)
	}
	return nil
}

// Allowlisted says whether the allowlist exempts image, as a pod names it:
// the kubelet matches the name as written, without its tag and digest and
// not normalized (nginx:1.27 is matched as nginx, not
// docker.io/library/nginx).
func (c *Config) Allowlisted(image string) bool {
	name := AllowlistName(image)
	return slices.ContainsFunc(c.Allowlist, func(p string) bool {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			return strings.HasPrefix(name, prefix)
		}
		return name == p
	})
}

// AllowlistName is what preloadedImagesVerificationAllowlist must hold to
// exempt image, as a pod names it: the name as written, without tag and
// digest.
func AllowlistName(image string) string {
	if r, err := reference.Parse(image); err == nil {
		if n, ok := r.(reference.Named); ok {
			return n.Name()
		}
	}
	return image
}

// VerifiesPreloaded says whether the kubelet verifies the pull credentials
// of image (as a pod names it) when the node holds it but the kubelet did
// not pull it, as for every image holdfast imports: it then pulls it as if
// it were not there, whether the pod has pull secrets or not.
func (c *Config) VerifiesPreloaded(image string) bool {
	if !c.Verifies {
		return false
	}
	switch c.Policy {
	case AlwaysVerify:
		return true
	case NeverVerifyAllowlistedImages:
		return !c.Allowlisted(image)
	}
	return false
}

// ForcesPull says whether the kubelet would pull image, held by the node,
// for a container or image volume of pullPolicy: with IfNotPresent it pulls
// (failing where no registry answers), with Never it refuses to start it
// (ErrImageNeverPull). Always pulls whatever the policy; an empty
// pullPolicy is not the kubelet's (the sandbox image, which the CRI pulls).
func (c *Config) ForcesPull(image, pullPolicy string) bool {
	return (pullPolicy == "IfNotPresent" || pullPolicy == "Never") && c.VerifiesPreloaded(image)
}
