package containerd

import "testing"

func TestDistributionSource(t *testing.T) {
	for _, c := range []struct{ name, key, repo string }{
		{"docker.io/library/busybox:1.36", "containerd.io/distribution.source.docker.io", "library/busybox"},
		{"docker.io/library/busybox@sha256:" + sixtyFour, "containerd.io/distribution.source.docker.io", "library/busybox"},
		{"registry.example.com:5000/team/app:1", "containerd.io/distribution.source.registry.example.com", "team/app"},
		{"[::1]:5000/app:1", "containerd.io/distribution.source.::1", "app"},
	} {
		key, repo, ok := distributionSource(c.name)
		if !ok || key != c.key || repo != c.repo {
			t.Errorf("distributionSource(%q) = %q, %q, %v; want %q, %q", c.name, key, repo, ok, c.key, c.repo)
		}
	}
	if _, _, ok := distributionSource("busybox"); ok {
		t.Error("a name without a host gave a label")
	}
}

const sixtyFour = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestMergeRepos(t *testing.T) {
	for _, c := range []struct {
		value string
		add   []string
		want  string
	}{
		{"", []string{"library/busybox"}, "library/busybox"},
		{"library/busybox", []string{"library/busybox"}, "library/busybox"},
		{"team/z,team/a", []string{"library/busybox", "team/a"}, "library/busybox,team/a,team/z"},
		{",team/a,", nil, "team/a"},
	} {
		if got := mergeRepos(c.value, c.add...); got != c.want {
			t.Errorf("mergeRepos(%q, %q) = %q; want %q", c.value, c.add, got, c.want)
		}
	}
}
