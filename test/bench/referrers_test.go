package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// TestWriteUnlistedReferrers writes the archives of the unlisted-referrers
// bench (docs/benchmarks.md) into the directory HOLDFAST_BENCH_REFERRERS
// names: layout/ (an OCI layout dir) and layout.tar (the same as an OCI
// archive) of HOLDFAST_BENCH_REFERRERS_COUNT (default 20,000) small images,
// each signed by key as cosign v3 signs (a sigstore bundle referrer) that
// index.json does not list, and key.pub and policy.yaml, which verifies
// them all. It skips unless HOLDFAST_BENCH_REFERRERS is set.
func TestWriteUnlistedReferrers(t *testing.T) {
	out := os.Getenv("HOLDFAST_BENCH_REFERRERS")
	if out == "" {
		t.Skip("set HOLDFAST_BENCH_REFERRERS=DIR to write the unlisted-referrers bench's archives into DIR")
	}
	count := 20000
	if s := os.Getenv("HOLDFAST_BENCH_REFERRERS_COUNT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("HOLDFAST_BENCH_REFERRERS_COUNT=%q: want a positive number", s)
		}
		count = n
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	key := sigtest.NewKey(t)
	cfg := fixture.ReferrersConfig{
		Count: count, Name: "example.com/bench/app:1", LayerSize: 512,
		Bundle: func(image digest.Digest) ([]byte, error) {
			return sigtest.KeyBundle(t, key, sigtest.Statement(t, image)), nil
		},
	}
	if err := fixture.WriteUnlistedReferrers(t.Context(), cfg, filepath.Join(out, "layout"), filepath.Join(out, "layout.tar")); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(out, "key.pub")
	if err := os.WriteFile(pub, sigtest.PublicPEM(t, key), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := "mode: enforce\nrules:\n  - images: [\"example.com/bench/*\"]\n    keys: [" + pub + "]\n"
	if err := os.WriteFile(filepath.Join(out, "policy.yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
}
