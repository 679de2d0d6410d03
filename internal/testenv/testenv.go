// Package testenv is for tests only: it decides whether a test may go without
// a part of the machine the suite needs (root, Debian's containerd 1.6,
// crictl). It may only when HOLDFAST_TEST_SKIP lists that part, so that a run
// that tested less says so instead of passing quietly.
package testenv

import (
	"os"
	"strings"
	"testing"
)

// SkipVar names the parts a machine may go without, comma-separated: root,
// containerd-1.6, containerd-lines (the matrix's other containerd builds),
// crictl, cosign, spegel, overlayfs, cluster (test/cluster's Kubernetes tools),
// sbom (cyclonedx-gomod, for tools/sbom).
const SkipVar = "HOLDFAST_TEST_SKIP"

// Missing skips t when SkipVar lists part, and fails it otherwise.
func Missing(t testing.TB, part, why string) {
	t.Helper()
	for _, p := range strings.Split(os.Getenv(SkipVar), ",") {
		if strings.TrimSpace(p) == part {
			t.Skipf("%s (%s lists %s)", why, SkipVar, part)
		}
	}
	t.Fatalf("%s; to skip this part on purpose, set %s=%s", why, SkipVar, part)
}

// RequireRoot stops t unless it runs as root: see Missing.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root", "needs root: "+why)
	}
}
