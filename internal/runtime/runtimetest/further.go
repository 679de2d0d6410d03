package runtimetest

import (
	"context"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Capabilities are what one backend does and another may not: a case that
// needs one checks the rest of its promise without it, and says so in the
// test's log, rather than pass on a backend that cannot show it.
type Capabilities struct {
	// PinEvents: the store reports holdfast's own writes (a Pin's create or
	// update) as image events, as containerd does. The fake reports records
	// made by others and Delete only.
	PinEvents bool
	// Ingests: imports write blobs through ingests that stay open while the
	// blob streams in, which Cleanup could abort (containerd's content
	// store). The fake writes each blob at once: Cleanup has none to spare.
	Ingests bool
	// Pulls: Pull fetches from a registry, as containerd's adapter does.
	// The fake answers pulls with its PullFunc only.
	Pulls bool
	// ExpireRecords: the GC collects a record whose expiry
	// (runtime.LabelExpire) has passed unless a lease holds it (containerd
	// 2.x, the fake with Expires). On 1.x every record is kept.
	ExpireRecords bool
}

// Store is a backend with what the further cases need of its store beyond
// the runtime's interface.
type Store struct {
	Backend
	Can Capabilities
	// DeleteBlob deletes a blob from the content store as its own delete
	// does (ctr content rm), whatever lease holds it.
	DeleteBlob func(t *testing.T, d digest.Digest)
	// NoCRI is a runtime of the same store where no CRI image service
	// serves holdfast (another namespace, say). Backend.Runtime's store
	// serves one.
	NoCRI func(t *testing.T) runtime.Runtime
	// Another is a second holdfast on the same store: another owner of
	// ingests (another data dir), as a one-off sync beside an agent.
	Another func(t *testing.T) runtime.Runtime
	// Ingests lists the refs of the ingests in progress (Can.Ingests).
	Ingests func(t *testing.T) []string
	// Label sets one label of a record as another writer would (ctr
	// images label).
	Label func(t *testing.T, name, key, value string)
	// GC runs the store's GC and returns once it is done.
	GC func(t *testing.T)
}

// RunFurther runs the cases that need a Store: image events, a source whose
// blob was lost, not-found and no-CRI errors, a Cleanup beside a live
// import, pins that leave every other label exactly as it was, one
// claimant at a time of the signature policy in force, pulls that fetch
// an image's signatures and that fetch from a preferred holder first
// (Can.Pulls), and records that outlive an expiry while holdfast pins
// them. Record names start with prefix, which no other record of the store has.
func RunFurther(t *testing.T, prefix string, newStore func(t *testing.T) Store) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, Store, string)
	}{
		{"WatchSeesChanges", watchSeesChanges},
		{"LostBlobReportedMissing", lostBlobMissing},
		{"AbsentIsNotFound", absentIsNotFound},
		{"NoCRIIsErrNoCRI", noCRI},
		{"CleanupSparesLiveImport", cleanupSparesLiveImport},
		{"PinUnpinTouchOnlyPinLabels", pinUnpinExactLabels},
		{"PolicyClaimedOnce", policyClaimedOnce},
		{"PullFetchesReferrers", pullFetchesReferrers},
		{"PullFetchesLegacyAndReferrers", pullFetchesLegacyAndReferrers},
		{"PullWithoutSignatures", pullWithoutSignatures},
		{"PullPrefersHolder", pullPrefersHolder},
		{"RecordOutlivesExpiry", recordOutlivesExpiry},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, newStore(t), prefix+c.name+":1") })
	}
}

// sourcePath is a source path made of a record name, unique per case.
func sourcePath(name, ext string) string {
	return "/conformance/" + strings.NewReplacer("/", "_", ":", "_").Replace(name) + ext
}

// stateOf is the state Sources reports on lease, and whether it reports one.
func stateOf(t *testing.T, rt runtime.Runtime, lease string) (runtime.SourceState, bool) {
	t.Helper()
	states, err := rt.Sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.Lease == lease {
			return st, true
		}
	}
	return runtime.SourceState{}, false
}
