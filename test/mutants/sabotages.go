package main

// The e2e package and its binaries are built once per sabotage that runs it:
// name as few e2e tests as catch the sabotage.
const e2e = "./test/e2e"

// sabotages each break one of holdfast's safety promises. The old text must
// occur exactly once in its file; when the code it names changes, update the
// sabotage rather than drop it.
var sabotages = []sabotage{
	{
		name: "unpinned-image-counted-pinned",
		// holdfast check and the required images take an image the node
		// holds but nothing pins for a pinned one: the kubelet may collect
		// it, and nobody is told.
		edits: []edit{{"internal/workload/state.go",
			"if r.Pinned() {",
			"if r.Pinned() || true {"}},
		tests: []tests{{"./internal/workload", []string{"TestJudge"}, nil}, {e2e, []string{"TestCheck"}, nil}},
	},
	{
		name: "unpinned-image-counted-ready",
		// The readiness rule takes an image the node holds unpinned for a
		// ready one without --allow-unpinned: the agent's report, holdfast
		// check and check --cluster say ready while the kubelet's GC may
		// delete it.
		edits: []edit{{"internal/workload/state.go",
			"return s == report.Pinned || (allowUnpinned && s == report.Present)",
			"return s == report.Pinned || s == report.Present"}},
		tests: []tests{{"./internal/workload", []string{"TestReady"}, nil}, {"./internal/agent", []string{"TestRequiredImages"}, nil}},
	},
	{
		name: "placement-ignored",
		// A workload's nodeSelector is not judged: every node is told it
		// needs the images of workloads that can never land on it, and
		// check --cluster -f names nodes that lack nothing.
		edits: []edit{{"internal/workload/placement.go",
			"if got, ok := labels[k]; !ok || got != v {",
			"if got, ok := labels[k]; ok && got != v {"}},
		tests: []tests{{"./internal/workload", []string{"TestPlacement"}, nil}, {"./internal/cli", []string{"TestJudgeCluster"}, nil}},
	},
	{
		name: "node-images-stale",
		// The reporter never reads what the node holds again after the
		// first time: check --cluster -f goes on saying an image carried
		// since is missing.
		edits: []edit{{"internal/reporter/nodeimages.go",
			"if rep.HeldHash != p.hash {",
			"if p.hash == \"\" {"}},
		tests: []tests{{"./internal/reporter", []string{"TestNodeImages"}, nil}},
	},
	{
		name: "refused-images-pinned",
		// The signature policy's refusals are ignored: under enforce an
		// image signed by another key, or unsigned, is named and pinned.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"if why, no := in.Refused(w); no {",
			"if why, no := in.Refused(w); no && false {"}},
		tests: []tests{{"./internal/reconcile", []string{"TestRefusedIsNoClaim"}, nil}, {e2e, []string{"TestSignaturePolicyEnforce"}, nil}},
	},
	{
		name: "digest-name-judged-alone",
		// A repo@digest name is judged by its own rule only: a rule written
		// for a tag leaves the digest name of the unsigned image unchecked,
		// so it is named and pinned, and a pod asking for it runs it.
		edits: []edit{{"internal/signature/names.go",
			"if !ok || v.State == Unchecked {",
			"if _ = ok; true {"}},
		tests: []tests{{"./internal/signature", []string{"TestDigestNameJudgedAsItsTag"}, nil}, {e2e, []string{"TestEnforceNamesNoRefusedImage"}, nil}},
	},
	{
		name: "verdict-memo-blind-to-the-rule",
		// The verdicts a judge remembers are keyed without what the rule
		// says: an edited policy keeps the verdicts, and the reasons, of the
		// rule it replaced.
		edits: []edit{{"internal/signature/policy.go",
			"	field(strconv.Itoa(r.Line))\n",
			"	_ = strconv.Itoa\n"}},
		tests: []tests{{"./internal/signature", []string{"TestJudgeRemembers"}, nil}},
	},
	{
		name: "refused-records-kept",
		// The records holdfast made of a refused image are only unpinned:
		// the kubelet still finds the image without a pull.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"case refused[name][target] && rec.Made():",
			"case refused[name][target] && rec.Made() && false:"}},
		tests: []tests{{"./internal/reconcile", []string{"TestRefusedRecordsDeleted"}, nil}, {e2e, []string{"TestEnforceNamesNoRefusedImage"}, nil}},
	},
	{
		name: "policy-in-force-ignored",
		// A holdfast command without --policy beside an enforcing agent
		// judges by no policy: holdfast import names an unsigned image.
		edits: []edit{{"internal/signature/inforce.go",
			"return Adoption{File: inForce.Path, Policy: pol, InForce: &inForce}, nil",
			"_ = pol; return own, nil"}},
		tests: []tests{{"./internal/signature", []string{"TestAdopt"}, nil}, {e2e, []string{"TestEnforceNamesNoRefusedImage"}, nil}},
	},
	{
		name: "present-blobs-not-leased",
		// Blobs the store already had are not added to the source's lease:
		// a layer above the in-memory limit, skipped rather than written,
		// is held by no lease once its first source goes.
		edits: []edit{{"internal/importer/importer.go",
			"if err := s.AddToLease(ctx, lease, toLease); err != nil {",
			"if err := s.AddToLease(ctx, lease, nil); err != nil {"}},
		tests: []tests{{e2e, []string{"TestLargeSharedLayerLeasedBySecondSource"}, nil}},
	},
	{
		name: "listed-images-not-leased",
		// A pin or pull list's images are pinned but their content is not
		// added to the list's lease.
		edits: []edit{{"internal/importer/importer.go",
			"if err := s.AddToLease(ctx, id, blobs); err != nil {",
			"if err := s.AddToLease(ctx, id, nil); err != nil {"}},
		tests: []tests{{e2e, []string{"TestPullList"}, nil}},
	},
	{
		name: "lease-emptied-after-import",
		// The source's lease keeps its state but not the blobs the import
		// wrote: only records keep the content.
		edits: []edit{{"internal/runtime/containerd/ingest.go",
			"return leases.WithLease(ctx, s.lease)",
			"return ctx"}},
		tests: []tests{{e2e, []string{"TestAgentHeal"}, nil}},
	},
	{
		name: "leases-expire",
		// Source leases get an expiry: GC drops them and their content.
		edits: []edit{{"internal/runtime/containerd/ingest.go",
			"leases.WithID(id), leases.WithLabels(",
			"leases.WithID(id), leases.WithExpiration(2e9), leases.WithLabels("}},
		tests: []tests{{e2e, []string{"TestRestarts"}, nil}},
	},
	{
		name: "sibling-dir-judged",
		// A dir whose name extends an images dir's (images-old beside
		// images) counts as inside it: its sources look gone.
		edits: []edit{{"internal/pass/plan.go",
			"strings.HasPrefix(path, d+string(filepath.Separator))",
			"strings.HasPrefix(path, d)"}},
		tests: []tests{{e2e, []string{"TestSiblingDirWithLongerName"}, nil}},
	},
	{
		name: "unpins-before-pins",
		// A pass unpins before it pins: an image whose name changed has no
		// pinned name in between.
		edits: []edit{{"internal/pass/apply.go",
			"\tpinFailed := false\n",
			"\tfor _, u := range plan.Unpins {\n\t\t_ = p.rt.Unpin(ctx, u.Name)\n\t}\n\tpinFailed := false\n"}},
		tests: []tests{{e2e, []string{"TestRenamedImageNeverLosesItsPin"}, nil}},
	},
	{
		name: "diff-unpins-unowned",
		// The plan unpins records holdfast does not own.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"if !rec.Owned() {",
			"if rec.Name == \"\" {"}},
		tests: []tests{{"./internal/reconcile", []string{"TestDiff"}, nil}},
	},
	{
		name: "unpin-ignores-ownership",
		// Both ownership checks gone: the plan and Unpin take a user's own
		// pin off a record holdfast never pinned.
		edits: []edit{
			{"internal/reconcile/reconcile.go",
				"if !rec.Owned() {",
				"if rec.Name == \"\" {"},
			{"internal/runtime/containerd/records.go",
				"\tif img.Labels[runtime.LabelPinned] != runtime.PinnedValue {\n\t\treturn nil\n\t}\n",
				""},
		},
		tests: []tests{{e2e, []string{"TestRestarts"}, nil}},
	},
	{
		name: "unpin-ignores-owner-label",
		// Unpin takes the CRI pin off a record holdfast never pinned.
		edits: []edit{{"internal/runtime/containerd/records.go",
			"\tif img.Labels[runtime.LabelPinned] != runtime.PinnedValue {\n\t\treturn nil\n\t}\n",
			""}},
		tests: []tests{{e2e, []string{"TestRuntimeConformance"}, nil}},
	},
	{
		name: "expired-record-not-held",
		// No record holdfast pins is held by its lease of records: on
		// containerd 2.x an expiry another writer set on one makes the GC
		// collect it behind the kubelet's back.
		edits: []edit{{"internal/runtime/containerd/expiry.go",
			"return !r.holds.off.Load() && runtime.ExpiresRecords(r.version)",
			"return false"}},
		tests: []tests{{e2e, []string{"TestExpiredRecordKept"}, nil}},
	},
	{
		name: "hold-outlives-unpin",
		// A record holdfast no longer pins stays held: an expiry set on it
		// never counts again.
		edits: []edit{
			{"internal/runtime/containerd/records.go",
				"\treturn r.unhold(ctx, name)\n}\n\n// Records lists",
				"\treturn nil\n}\n\n// Records lists"},
			{"internal/runtime/containerd/expiry.go",
				"if !found || img.Labels[runtime.LabelPinned] != runtime.PinnedValue {",
				"if !found && img.Labels[runtime.LabelPinned] == \"never\" {"},
		},
		tests: []tests{{e2e, []string{"TestRuntimeConformance"}, nil}},
	},
	{
		name: "unlisted-referrers-missed",
		// A referrer index.json does not list (cosign v3's bundle, saved by
		// cosign save) is not found: the image it signs is refused as
		// unsigned under enforce.
		edits: []edit{{"internal/archive/resolve.go",
			"\tw.addUnlistedReferrers()\n",
			"\n"}},
		tests: []tests{{"./internal/archive", []string{"TestUnlistedReferrersTar", "TestUnlistedReferrersDir"}, nil}},
	},
	{
		name: "pull-fetches-no-referrers",
		// A pull fetches the legacy .sig tag only: an image signed as cosign
		// v3 signs, pulled from a registry or a peer, is refused as unsigned.
		edits: []edit{{"internal/runtime/containerd/signatures.go",
			"for _, d := range reg.signatureReferrers(ctx, image) {",
			"for _, d := range reg.signatureReferrers(ctx, image)[:0] {"}},
		tests: []tests{{e2e, []string{"TestRuntimeConformance"}, nil}},
	},
	{
		name: "signature-record-judged-alone",
		// A record of an image's signatures is judged by its own name, not
		// with the image it signs: a refused image's signatures keep names.
		edits: []edit{{"internal/signature/judge.go",
			"\tif w.Signs != \"\" {\n\t\tnames := g.names[w.Signs]",
			"\tif false {\n\t\tnames := g.names[w.Signs]"}},
		tests: []tests{{"./internal/signature", []string{"TestJudgeSignatureRecords"}, nil}},
	},
	{
		name: "peer-copy-not-inlined",
		// The records of an image's signatures name the manifests as they
		// came: K3s's spegel does not serve their payloads, and a peer
		// refuses the image as unsigned.
		edits: []edit{{"internal/importer/records.go",
			"if err == nil && ok {",
			"if err == nil && ok && false {"}},
		tests: []tests{{"./internal/importer", []string{"TestImportNamesSignatures"}, nil}},
	},
	{
		name: "diff-unpins-wanted",
		// The plan unpins names a kept source still wants.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"if _, ok := wanted[name]; ok || (in.Named != nil && in.Named(name)) {",
			"if in.Named != nil && in.Named(name) {"}},
		tests: []tests{{"./internal/reconcile", []string{"TestDiffNeverUnpinsWanted"}, nil}},
	},
	{
		name: "prior-pin-not-recorded",
		// Pinning a record the user had pinned does not say so, so
		// unpinning it later takes the user's pin too.
		edits: []edit{{"internal/runtime/containerd/records.go",
			"if first && img.Labels[runtime.LabelCRIPinned] == runtime.PinnedValue {",
			"if first && img.Labels[runtime.LabelCRIPinned] == \"never\" {"}},
		tests: []tests{{e2e, []string{"TestRestarts"}, nil}},
	},
	{
		name: "prior-pin-ignored-on-unpin",
		// Unpin removes the CRI label although the user's pin came first.
		edits: []edit{{"internal/runtime/containerd/records.go",
			`if img.Labels[runtime.LabelPriorPin] == "true" {`,
			"if false {"}},
		tests: []tests{{e2e, []string{"TestRestarts"}, nil}},
	},
	{
		name: "old-lease-released-before-new-one",
		// A changed source's old lease is released although its new
		// content failed to import: its images lose pins and content.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"case current[st.Source]:",
			"case true:"}},
		tests: []tests{{"./internal/reconcile", []string{"TestDiff"}, nil}},
	},
	{
		name: "unreadable-dir-judged",
		// Sources under a dir the pass cannot judge (unreadable, or not one
		// of its images dirs) lose their pins and leases.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"case in.Unknown != nil && in.Unknown(st.Source):",
			"case false:"}},
		tests: []tests{{"./internal/reconcile", []string{"TestDiff"}, nil}},
	},
	{
		name: "heal-records-prior-pin",
		// A heal of a record that lost only holdfast's label takes the CRI
		// pin it finds (holdfast's own) for a user's, so it is never unpinned.
		edits: []edit{{"internal/runtime/containerd/records.go",
			"if first && img.Labels[runtime.LabelCRIPinned] == runtime.PinnedValue {",
			"if first || img.Labels[runtime.LabelCRIPinned] == runtime.PinnedValue {"}},
		tests: []tests{{e2e, []string{"TestSyncHealOfHoldfastLabelKeepsNoPriorPin"}, nil}},
	},
	{
		name: "another-holdfasts-ingest-aborted",
		// The start-of-pass cleanup aborts another holdfast's import in
		// progress (same prefix, another owner), not only stale ingests.
		edits: []edit{{"internal/runtime/containerd/containerd.go",
			"return strings.HasPrefix(st.Ref, refPrefix) && now.Sub(st.UpdatedAt) > staleIngestAge",
			"return strings.HasPrefix(st.Ref, refPrefix) || now.Sub(st.UpdatedAt) > staleIngestAge"}},
		tests: []tests{{"./internal/runtime/containerd", []string{"TestStaleIngests"}, nil}, {e2e, []string{"TestRuntimeConformance"}, nil}},
	},
	{
		name: "unmounted-volume-judged",
		// An images dir without its marker and with no source (a volume not
		// mounted) is taken for emptied: everything it brought is unpinned.
		edits: []edit{{"internal/pass/plan.go",
			"return under(scan.Unreadable, path) || under(unmarked, path) || !under(scan.Dirs, path)",
			"return under(scan.Unreadable, path) || len(unmarked) < 0 || !under(scan.Dirs, path)"}},
		tests: []tests{{"./internal/pass", []string{"TestEmptiedDirNeedsMarker"}, nil}},
	},
	{
		name: "unreadable-judged",
		// Sources the pass could not read (a list it cannot open, a dir it
		// cannot list) are judged: what they brought is unpinned.
		edits: []edit{{"internal/pass/plan.go",
			"return under(scan.Unreadable, path) || under(unmarked, path) || !under(scan.Dirs, path)",
			"return under(unmarked, path) || !under(scan.Dirs, path)"}},
		tests: []tests{{"./internal/pass", []string{"TestUnreadableListsKeep"}, nil}},
	},
	{
		name: "document-digest-unchecked",
		// A JSON document whose bytes do not match its blobs/<alg>/<hex>
		// name is taken as that digest.
		edits: []edit{{"internal/archive/walk.go",
			"if got := d.Algorithm().FromBytes(b); got != d {",
			"if got := d.Algorithm().FromBytes(b); got != d && false {"}},
		tests: []tests{{"./internal/archive", []string{"TestWalkErrors"}, nil}},
	},
	{
		name: "blob-digest-unchecked",
		// The store is not told a blob's expected digest, and the walker
		// does not compare what the store computed: a tampered layer is
		// stored under its real digest and the image imported.
		edits: []edit{
			{"internal/runtime/containerd/ingest.go",
				"w.put(ctx, ocispec.Descriptor{Digest: expected, Size: size}, r, nil, nil)",
				"w.put(ctx, ocispec.Descriptor{Size: size}, r, nil, nil)"},
			{"internal/archive/walk.go", `if got != "" && got != d {`, "if false {"},
			{"internal/archive/pool.go", `} else if got != "" && got != j.dgst {`, "} else if false {"},
			{"internal/runtime/containerd/direct.go", `if expected != "" && d != expected {`, "if false {"},
		},
		tests: []tests{{e2e, []string{"TestTamperedLayerRefused"}, nil}},
	},
	{
		name: "no-distribution-source",
		// holdfast's imports carry no distribution source labels: spegel
		// advertises none of their blobs, and no peer can pull them.
		edits: []edit{{"internal/runtime/containerd/labels.go",
			"\tkey, repo, ok := distributionSource(name)\n\tif !ok {",
			"\tkey, repo, ok := distributionSource(name)\n\tif _ = ok; true {"}},
		tests: []tests{{e2e, []string{"TestPeersShareImports"}, nil}},
	},
	{
		name: "state-blob-without-source",
		// The blob of a lease's state carries no distribution source label:
		// spegel logs an error for each one committed.
		edits: []edit{{"internal/runtime/containerd/leases.go",
			`runtime.LabelState: st.Lease, localSource: "state"}`,
			`runtime.LabelState: st.Lease}`}},
		tests: []tests{{e2e, []string{"TestPeersShareImports"}, nil}},
	},
	{
		name: "peer-list-never-pulls",
		// --pull-required lists no required image the node lacks.
		edits: []edit{{"internal/agent/peers.go",
			"return st == report.Missing || st == report.Mismatch || st == report.Present",
			"return false && st == report.Missing"}},
		tests: []tests{{"./internal/agent", []string{"TestPullRequired"}, nil}, {e2e, []string{"TestPullRequiredFromPeers"}, nil}},
	},
	{
		name: "peer-grace-ignored",
		// An image that left the required set, or an ImageSet, leaves its
		// list at once.
		edits: []edit{{"internal/agent/ownlist.go",
			"if now.Sub(since) < grace {",
			"if now.Sub(since) < 0 {"}},
		tests: []tests{{"./internal/agent", []string{"TestPullRequired", "TestPeerListReleasedWhenOff", "TestSets"}, nil}, {e2e, []string{"TestPullRequiredFromPeers", "TestSetsUnderRun"}, nil}},
	},
	{
		name: "peer-pull-backoff-as-registry",
		// A failed pull of the peer source waits as long as a registry's.
		edits: []edit{{"internal/pass/pulls.go",
			"fromPeers := pl.Kind == source.Peers",
			"fromPeers := false"}},
		tests: []tests{{"./internal/pass", []string{"TestPeerPullRetriesSooner", "TestBackgroundPullBackoff"}, nil}},
	},
	{
		name: "content-root-made-lazily-not-probed",
		// A content store directory containerd has not made yet (1.7, 2.2
		// before their first write) fails direct writes.
		edits: []edit{{"internal/runtime/containerd/contentroot.go",
			"if errors.Is(err, fs.ErrNotExist) {",
			"if errors.Is(err, fs.ErrNotExist) && false {"}},
		tests: []tests{{e2e, []string{"TestRestarts"}, nil}},
	},
	{
		name: "content-root-made-lazily-not-checked",
		// The disk check is skipped while containerd has not made its
		// content store directory yet.
		edits: []edit{{"internal/runtime/containerd/space.go",
			"\t\tat = existingAncestor(root)\n",
			"\t\tat = root\n"}},
		tests: []tests{{"./internal/runtime/containerd", []string{"TestSpaceOfMissingRoot"}, nil}, {e2e, []string{"TestDiskContentRoot"}, nil}},
	},
	{
		name: "peer-list-rewritten-when-unreadable",
		// A peer list that cannot be read is written anew, dropping what it held.
		edits: []edit{{"internal/agent/ownlist.go",
			"l.log.Warn(\"reading the \"+l.what+\"; it stays as it is\", \"path\", l.path, \"error\", err)\n\t\treturn false",
			"l.log.Warn(\"reading the \"+l.what+\"; it stays as it is\", \"path\", l.path, \"error\", err)\n\t\tl.loaded, l.left = true, map[string]time.Time{}\n\t\treturn true"}},
		tests: []tests{{"./internal/agent", []string{"TestPeerListUnreadableStays"}, nil}},
	},
	{
		name: "incomplete-image-imported",
		// A host-platform blob neither in the archive nor in the store does
		// not stop the import.
		edits: []edit{{"internal/importer/importer.go",
			"\t\tif ref.Required {\n\t\t\treturn nil, fmt.Errorf(\"%s %s %s is neither in the archive nor in the store\"",
			"\t\tif false {\n\t\t\treturn nil, fmt.Errorf(\"%s %s %s is neither in the archive nor in the store\""}},
		tests: []tests{{e2e, []string{"TestBadInputs"}, nil}},
	},
	{
		name: "others-ingests-aborted",
		// The start-of-pass cleanup takes every ingest for a stale one of
		// holdfast's: another client's upload in progress is lost.
		edits: []edit{
			{"internal/runtime/containerd/containerd.go", "cs.ListStatuses(ctx, fmt.Sprintf(`ref~=^%s`, refPrefix))", "cs.ListStatuses(ctx)"},
			{"internal/runtime/containerd/containerd.go",
				"return strings.HasPrefix(st.Ref, refPrefix) && now.Sub(st.UpdatedAt) > staleIngestAge",
				"return now.Sub(st.UpdatedAt) >= 0"},
		},
		tests: []tests{{e2e, []string{"TestOthersIngestsAndLeasesUntouched", "TestRuntimeConformance"}, nil}},
	},
	{
		name: "embedded-stop-leaves-mounts",
		// Stopping the embedded containerd does not unmount what is left
		// mounted under its dirs.
		edits: []edit{{"internal/embedded/process.go",
			"if err := unmountUnder(p.layout.Root, p.layout.State, p.layout.Temp); err != nil {",
			"if err := error(nil); err != nil {"}},
		tests: []tests{{e2e, []string{"TestEmbeddedLifecycle"}, nil}},
	},
	{
		name: "no-pass-after-reconnect",
		// After a lost event stream is back, no full pass heals what
		// happened meanwhile.
		edits: []edit{{"internal/agent/agent.go",
			"\t\t\ta.loop.kick(\"reconnect\")\n",
			""}},
		tests: []tests{{e2e, []string{"TestAgentReconnect"}, nil}},
	},
	{
		name: "file-imported-while-written",
		// The agent does not wait for a file to settle: a file still being
		// written is imported.
		edits: []edit{{"internal/pass/settle.go",
			"if settled := p.settledAt(src, now); settled.After(now) {",
			"if settled := p.settledAt(src, now); settled.After(now) && false {"}},
		tests: []tests{{e2e, []string{"TestAgentWatch"}, nil}},
	},
	{
		name: "ready-while-written",
		// /readyz turns 200 although a source of the first pass is still
		// being written.
		edits: []edit{{"internal/agent/readiness.go",
			"if len(res.Settling) == 0 {",
			"if true {"}},
		tests: []tests{{e2e, []string{"TestAgentReadiness"}, nil}},
	},
	{
		name: "bench-leaves-containerd-running",
		// The bench harness does not stop the containerds it started (nor
		// remove their dirs, which would make them exit by themselves).
		edits: []edit{
			{"test/bench/store.go", "return errors.Join(s.client.Close(), s.proc.Stop(ctx))", "return s.client.Close()"},
			{"test/bench/cold.go", "if rerr := os.RemoveAll(dir); rerr != nil {", "if rerr := os.Remove(os.DevNull + \"/x\"); rerr == nil {"},
			{"test/bench/bench.go", "if cfg.Keep {", "if true {"},
		},
		tests: []tests{{"./test/bench", []string{"TestSmoke"}, []string{"HOLDFAST_BENCH_SMOKE=1"}}},
	},
	{
		name: "upgrade-unpins-while-written",
		// Sources gone from a dir while another source there is still being
		// written are released at once: an upgrade unpins what both hold.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"case !present && in.Hold != nil && in.Hold(st.Source):",
			"case false && !present && in.Hold != nil && in.Hold(st.Source):"}},
		tests: []tests{{"./internal/pass", []string{"TestPassHoldsGoneSourcesWhileOneIsWritten"}, nil}},
	},
	{
		name: "pull-list-adopts-drift",
		// A pull list takes a re-pointed record as what it wants.
		edits: []edit{{"internal/pass/pulls.go",
			"if w, ok := before[e.Ref]; ok {",
			"if w, ok := have[e.Ref]; ok {"}},
		tests: []tests{{"./internal/pass", []string{"TestPullListRestoresDrift"}, nil}},
	},
	{
		name: "future-mtime-waits",
		// Settling trusts the mtime alone: a file from a machine whose clock
		// is ahead waits until this clock catches up.
		edits: []edit{{"internal/pass/settle.go",
			"if byClock.Before(byMtime) || src.Incomplete != \"\" {",
			"if false && byClock.Before(byMtime) || src.Incomplete != \"\" {"}},
		tests: []tests{{"./internal/pass", []string{"TestSettledAt"}, nil}},
	},
	{
		name: "heal-pins-before-first-pin",
		// The wanted set includes names the pass has yet to pin for the first
		// time: an event heal pins one first and misses a user's pin.
		edits: []edit{{"internal/pass/apply.go",
			"p.hand.Pinning(pinning(plan))",
			"p.hand.Pinning(plan.WantedNames)"}},
		tests: []tests{{"./internal/agent", []string{"TestUsersPinSurvivesAnEarlyEvent"}, nil}},
	},
	{
		name: "failed-import-not-retried",
		// A failed import waits for an unrelated change or the resync.
		edits: []edit{{"internal/pass/pass.go",
			"if next := p.nextRetry(all); !next.IsZero()",
			"if next := p.nextRetry(all); false && !next.IsZero()"}},
		tests: []tests{{"./internal/agent", []string{"TestFailedImportRetried"}, nil}},
	},
	{
		name: "pin-pattern-waits-for-resync",
		// A late image matching a pin list pattern waits for the next pass.
		edits: []edit{{"internal/agent/heal.go",
			"pass := !h.collecting && !wanted && present && (ours || h.pinMatchLocked(ev.Name))",
			"pass := !h.collecting && !wanted && present && ours"}},
		tests: []tests{{"./internal/agent", []string{"TestPinPatternBringsPass"}, nil}},
	},
	{
		name: "kept-source-judged-by-its-file",
		// A kept source (holdfast import) is released when its file goes.
		edits: []edit{{"internal/reconcile/reconcile.go",
			"case st.Kept && st.Complete:",
			"case st.Kept && st.Complete && present:"}},
		tests: []tests{{"./internal/reconcile", []string{"TestKeptSourceStaysWhenItsFileIsGoneFromAnImagesDir"}, nil}},
	},
	{
		name: "zstd-seek-table-unchecked",
		// A seek table that lies about its frames is taken as it is.
		edits: []edit{{"internal/archive/zstdframe/table.go",
			"	defer func() { z.records, z.counted = z.records[:0], 0 }()",
			"	defer func() { z.records, z.counted = z.records[:0], 0 }()\n\tif true {\n\t\treturn nil\n\t}"}},
		tests: []tests{{"./internal/archive", []string{"TestZstdFramesCorrupt"}, nil}, {e2e, []string{"TestBadInputs"}, nil}},
	},
	{
		name: "zstd-frames-in-flight-unbounded",
		// Frames decoded ahead of the reader are not bounded by a few:
		// memory grows with the stream.
		edits: []edit{{"internal/archive/zstdframe/reader.go",
			"free: make(chan *unit, workers+2)",
			"free: make(chan *unit, workers+200)"}},
		tests: []tests{{e2e, []string{"TestHostileDecompression"}, nil}},
	},
	{
		name: "zstd-lent-frame-reused",
		// A frame lent to the read-ahead is decoded over before it was
		// read: the walk hashes bytes of a later frame.
		edits: []edit{{"internal/archive/zstdframe/reader.go",
			"return b, func() { z.recycle(u) }, true",
			"z.recycle(u)\n\treturn b, func() {}, true"}},
		tests: []tests{{"./internal/archive/zstdframe", []string{"TestZstdFramesLend"}, nil}},
	},
	{
		name: "zstd-frame-content-uncapped",
		// A frame is decoded whole whatever content its blocks may hold.
		edits: []edit{{"internal/archive/zstdframe/scan.go",
			"if bound > frameDecCap {",
			"if false && bound > frameDecCap {"}},
		tests: []tests{{"./internal/archive", []string{"TestZstdFramesMemory"}, nil}},
	},
	{
		name: "zstd-window-uncapped",
		// A zstd frame header may declare a 2 GiB window: the decoder
		// allocates and fills that much for a file of a few KiB.
		edits: []edit{{"internal/archive/compression.go",
			"zstdMaxWindow = 128 << 20",
			"zstdMaxWindow = 1 << 31"}},
		tests: []tests{{"./internal/archive", []string{"TestDecoderMemoryCaps"}, nil}},
	},
	{
		name: "symlink-out-of-archive-followed",
		// A symlink entry pointing outside the archive is taken as a path
		// like any other.
		edits: []edit{{"internal/archive/tarwalk.go",
			"if path.IsAbs(hdr.Linkname) || escapes(target) {",
			"if false {"}},
		tests: []tests{{"./internal/archive", []string{"TestWalkHostileEntries"}, nil}},
	},
	{
		name: "configmap-swap-ignored",
		// Every event on a dotfile is ignored, ..data and renames too: the
		// kubelet's atomic swap of a ConfigMap volume goes unseen, and a
		// cluster pin set changed with helm upgrade waits for the next resync.
		edits: []edit{{"internal/watch/watch.go",
			"strings.HasPrefix(base, \".\") && base != kubeletData &&\n\t\t\t\t!ev.Has(fsnotify.Rename) && !ev.Has(fsnotify.Remove) {",
			"strings.HasPrefix(base, \".\") {"}},
		tests: []tests{{"./internal/agent", []string{"TestAgentConfigMapPins"}, nil}},
	},
	{
		name: "lost-blob-file-unnoticed",
		// A blob file removed from the content store by hand, its record
		// still there, leaves its source counted intact: never written again.
		edits: []edit{{"internal/runtime/containerd/lostfiles.go",
			"return errors.Is(err, fs.ErrNotExist)",
			"return errors.Is(err, fs.ErrNotExist) && false"}},
		tests: []tests{{e2e, []string{"TestLostBlobFileReimported"}, nil}},
	},
	{
		name: "probe-leases-never-swept",
		// The content-root probe's lease a killed holdfast left is never
		// deleted: each kill -9 holds one more blob.
		edits: []edit{{"internal/runtime/containerd/containerd.go",
			"errs = append(errs, r.sweepProbes(ctx, time.Now()), r.direct.sweep(ctx, r))",
			"errs = append(errs, r.direct.sweep(ctx, r))"}},
		tests: []tests{{e2e, []string{"TestProbeLeaseIsShortLivedAndSwept"}, nil}},
	},
	{
		name: "direct-temp-left-by-quiet-pass",
		// Only a pass that writes a blob sweeps the temp files a killed
		// writer left; a pass with nothing to import leaves them forever.
		edits: []edit{{"internal/runtime/containerd/containerd.go",
			"errs = append(errs, r.sweepProbes(ctx, time.Now()), r.direct.sweep(ctx, r))",
			"errs = append(errs, r.sweepProbes(ctx, time.Now()))"}},
		tests: []tests{{e2e, []string{"TestDirectWritePathSweepsWithoutImporting"}, nil}},
	},
	{
		name: "direct-commit-without-source-labels",
		// Blobs held until the walk ends are committed without their
		// distribution source labels, and counted as labelled.
		edits: []edit{{"internal/runtime/containerd/direct.go",
			"w.commitLinked(ctx, desc, f, sources.labelsOf(d))",
			"w.commitLinked(ctx, desc, f, nil)"}},
		tests: []tests{{e2e, []string{"TestDirectWritePathLabelsInOnePass"}, nil}},
	},
	{
		name: "linked-blobs-never-removed",
		// A blob an import linked into the store and never got recorded
		// (the import failed, was released or killed) stays for good.
		edits: []edit{{"internal/runtime/containerd/linked.go",
			"if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {",
			"if err := error(nil); err != nil && !errors.Is(err, fs.ErrNotExist) {"}},
		tests: []tests{{e2e, []string{"TestNoBlobFileLeftByAFailedImport"}, nil}},
	},
	{
		name: "links-not-synced-before-commit",
		// The direct path's links into blobs/sha256 are not made durable
		// before containerd records the blobs.
		edits: []edit{{"internal/runtime/containerd/direct.go",
			"} else if err = files.SyncDir(blobsDir); err == nil {",
			"} else if err = error(nil); err == nil && blobsDir != \"\" && files.SyncDir != nil {"}},
		tests: []tests{{e2e, []string{"TestDirectSyncsBeforeCommit"}, nil}},
	},
	{
		name: "spool-overlap-allowed",
		// A spool dir over an images dir is taken: a pass imports that
		// images dir's archives as kept and deletes them.
		edits: []edit{{"internal/cli/root.go", "return o.checkSpoolDirs()", "return nil"}},
		tests: []tests{{"./internal/cli", []string{"TestSpoolOverlappingImagesDirRefused"}, nil}},
	},
	{
		name: "release-ignores-fresh-pins",
		// release judges the leases only: a pattern pinned since the last
		// pass does not keep its images pinned.
		edits: []edit{{"internal/pass/keep.go", "&& !standing.Wants(w.Name)", ""}},
		tests: []tests{{e2e, []string{"TestReleaseKeepsWhatAFreshPinWants"}, nil}},
	},
	{
		name: "lost-kept-content-quiet",
		// A kept source whose content left the store passes as fine.
		edits: []edit{{"internal/pass/pass.go",
			"sum.Failures = append(sum.Failures, lostKept(states)...)",
			"_ = lostKept(states)"}},
		tests: []tests{{e2e, []string{"TestKeptSourceLostContentFails"}, nil}},
	},
	{
		name: "data-dir-lock-on-the-file-only",
		// Only the lock file is locked: deleting it lets a second owner in.
		edits: []edit{{"internal/datadir/datadir.go",
			"if err := lockExclusive(d, dir); err != nil {",
			"if err := error(nil); err != nil {"}},
		tests: []tests{{"./internal/datadir", []string{"TestLockHoldsWhenLockFileDeleted"}, nil}},
	},
	{
		name: "kept-source-plain-path",
		// A kept source's lease names its path as an images-dir source's
		// does: a holdfast older than kept sources releases it.
		edits: []edit{{"internal/runtime/lease.go", "return keptMark + path", "return path"}},
		tests: []tests{{e2e, []string{"TestRollbackKeepsKeptSources"}, nil}},
	},
	{
		name: "blobs-dir-unsynced-after-import",
		// An import ends without syncing the blobs directory: on containerd
		// 1.6 a spool file can go before the rename of its blobs is durable.
		edits: []edit{{"internal/importer/importer.go", "err = s.Sync(ctx)", "err = nil"}},
		tests: []tests{{e2e, []string{"TestSpoolDeletedOnlyWhenDurable"}, nil}},
	},
	{
		name: "waiting-list-wants-unpinned",
		// A pin list left to settle has no lease yet: a pass unpins what it
		// was just given.
		edits: []edit{{"internal/pass/pass.go", "if len(waitingLists) == 0 {\n\t\treturn nil", "if true {\n\t\treturn nil"}},
		tests: []tests{{e2e, []string{"TestReleaseUnderRunKeepsAFreshPin"}, nil}},
	},
	{
		name: "sink-always-streams",
		// The sink never takes the direct path, whatever --write-path says.
		edits: []edit{{"internal/runtime/containerd/ingest.go",
			"root, err := w.r.direct.rootFor(ctx, w.r)",
			"root, err := \"\", error(nil)"}},
		tests: []tests{{e2e, []string{"TestRestarts"}, nil}},
	},
	{
		name: "unchanged-source-read-again",
		// A source whose lease holds a complete, intact import at its
		// identity is read and written again at every pass.
		edits: []edit{{"internal/importer/importer.go",
			"if prior = *known; prior.Intact && upToDate(prior) {",
			"if prior = *known; false {"}, {"internal/importer/importer.go",
			"if ok, err := s.Intact(ctx, prior); err != nil || ok {",
			"if ok, err := s.Intact(ctx, prior); err != nil || (ok && false) {"}},
		tests: []tests{{"./internal/importer", []string{"TestImportLeasesAndRecords"}, nil}},
	},
	{
		name: "dry-run-writes",
		// holdfast plan's pass unpins for real.
		edits: []edit{{"internal/pass/dryrun.go",
			"func (dryRuntime) Unpin(context.Context, string) error                 { return nil }",
			"func (d dryRuntime) Unpin(ctx context.Context, n string) error { return d.Backend.Unpin(ctx, n) }"}},
		tests: []tests{{e2e, []string{"TestPlanMatchesSync"}, nil}},
	},
	{
		name: "view-forgets-imports",
		// The pass's view of the store does not take in what its imports
		// wrote: it plans without their leases (a dry run shows the old
		// lease of a replaced archive kept, its new names unpinned).
		edits: []edit{{"internal/pass/imports.go",
			"\t\t\tv.put(res.State)\n",
			""}},
		tests: []tests{{"./internal/pass", []string{"TestPassListsTheStoreOnce"}, nil}, {e2e, []string{"TestPlanAgreesWithSync"}, nil}},
	},
	{
		name: "pass-hands-heal-nothing",
		// The pass hands the healer no wanted names: a record deleted after
		// the pass is never healed from its lease.
		edits: []edit{{"internal/agent/handoff.go",
			"\th.wanted = wanted\n\th.kept = kept\n\th.collecting = false",
			"\th.wanted = map[string]hfruntime.Want{}\n\th.kept = kept\n\th.collecting = false"}},
		tests: []tests{{"./internal/agent", []string{"TestHealBackoff", "TestHealDuringFirstPass"}, nil}},
	},
	{
		name: "view-never-relisted",
		// A pass plans with the store as listed at its start even when an
		// image event came since: a record deleted meanwhile is not healed
		// by that pass.
		edits: []edit{{"internal/pass/pass.go", "if !p.hand.Changed(mark) {", "if _ = mark; true {"}},
		tests: []tests{{"./internal/agent", []string{"TestHealDuringFirstPass"}, nil}},
	},
	{
		name: "pull-backoff-ignored",
		// A reference whose pull failed is pulled again by every pass: an
		// unreachable registry slows each pass by its timeouts.
		edits: []edit{{"internal/pass/pulls.go", "if err, wait := p.pullBackoff(e.Ref); wait {", "if err, wait := p.pullBackoff(e.Ref); wait && false {"}},
		tests: []tests{{"./internal/pass", []string{"TestPullRetriesWithBackoff"}, nil}},
	},
	{
		name: "bundle-signature-imported",
		// A haul's signatures, attestations and referrers, which carry the
		// name of the image they sign, are imported: the name may point at
		// a signature.
		edits: []edit{{"internal/archive/resolve.go", "if why := skipKind(kind); why != \"\" {", "if why := skipKind(kind); false && why != \"\" {"}},
		tests: []tests{{"./internal/archive", []string{"TestHaul"}, nil}, {e2e, []string{"TestBundlesSync"}, nil}},
	},
	{
		name: "zarf-checksums-unchecked",
		// A file of a Zarf package that differs from its line in
		// checksums.txt is taken as it is.
		edits: []edit{{"internal/archive/bundle.go", "case want != got:", "case false && want != got:"}},
		tests: []tests{{"./internal/archive", []string{"TestZarfRefused"}, nil}},
	},
	{
		name: "split-gap-imported",
		// A split bundle missing a part is imported as if whole.
		edits: []edit{{"internal/pass/imports.go", "	if src.Incomplete == \"\" {\n		return nil", "	if true {\n		return nil"}},
		tests: []tests{{"./internal/pass", []string{"TestIncompleteSplitWaitsThenFails"}, nil}},
	},
	{
		name: "seek-zstd-skipped-frames-unchecked",
		// Read by its seek table, a frame no write decoded (in a blob the
		// store has) is never decoded: a broken one goes unnoticed.
		edits: []edit{{"internal/archive/zstdframe/file.go",
			"if i >= len(z.ends) || z.at(i) >= below {",
			"if true {"}},
		tests: []tests{{"./internal/archive", []string{"TestSeekZstdCorrupt"}, nil}},
	},
	{
		name: "seek-zstd-frame-size-unchecked",
		// A frame read by the seek table that decodes to less than the
		// table says is taken: every offset after it is off.
		edits: []edit{{"internal/archive/zstdframe/file.go",
			"case len(out) != int(f.Size):",
			"case false:"}},
		tests: []tests{{"./internal/archive", []string{"TestSeekZstdCorrupt"}, nil}},
	},
	{
		name: "seek-zstd-header-size-trusted",
		// A seek table that disagrees with a frame's declared content
		// size is trusted.
		edits: []edit{{"internal/archive/zstdframe/file.go",
			"if window(&fh) > limit || fh.HasFCS && fh.FrameContentSize != e.Size {",
			"if window(&fh) > limit {"}},
		tests: []tests{{"./internal/archive", []string{"TestSeekZstdCorrupt"}, nil}},
	},
	{
		name: "seek-zstd-table-checksum-unchecked",
		// A seek table's checksum that is not the frame's is let pass,
		// where the stream refuses it.
		edits: []edit{{"internal/archive/zstdframe/file.go",
			"case f.HasSum && binary.LittleEndian.Uint32(b.comp[len(b.comp)-4:]) != f.Sum:",
			"case false:"}},
		tests: []tests{{"./internal/archive", []string{"TestSeekZstdCorrupt"}, nil}},
	},
	{
		name: "seek-zstd-small-blobs-deferred",
		// Every blob read by the seek table is written by its own job:
		// a frame holding many small blobs is decoded once per blob.
		edits: []edit{{"internal/archive/zstdframe/file.go",
			"const deferFrames = 4",
			"const deferFrames = 1"}},
		tests: []tests{{"./internal/archive", []string{"TestSeekZstdDefers"}, nil}},
	},
	{
		name: "signature-config-not-kept",
		// An import keeps a signature manifest and its signature layer, not
		// its config: an export of the image names a config it does not
		// hold, and differs from one of a node where ctr imported it.
		edits: []edit{{"internal/importer/signatures.go",
			"for _, c := range signatureChildren(walked.Docs[m.Digest], sig.Layer) {",
			"for _, c := range []ocispec.Descriptor{sig.Layer} {"}},
		tests: []tests{{"./internal/importer", []string{"TestImportKeepsWholeSignatures"}, nil}, {"./internal/exporter", []string{"TestExportSignedIsWhole"}, nil},
			{e2e, []string{"TestExportSignedSameWhicheverImporter"}, nil}},
	},
	{
		name: "platform-referrers-not-kept",
		// An import keeps the referrers of an image's index only, not those
		// of its platforms' manifests: the signatures of each platform's
		// manifest are lost, and an export of the image verifies per
		// platform no more.
		edits: []edit{{"internal/importer/referrers.go",
			"subjects := imageManifests(walked.Docs, img.Target)",
			"subjects := []digest.Digest{img.Target.Digest}"}},
		tests: []tests{{"./internal/importer", []string{"TestImportKeepsReferrers"}, nil}, {"./internal/exporter", []string{"TestExportCarriesReferrers"}, nil}},
	},
	{
		name: "export-drops-referrers",
		// An export writes the blobs of the referrers a source keeps but
		// lists none of them: the SBOM and the signatures of the platforms'
		// manifests are lost to whoever imports the archive.
		edits: []edit{{"internal/exporter/exporter.go",
			"p.Layout.Index = append(p.Layout.Index, refs.entries...)",
			"p.Layout.Index = append(p.Layout.Index, refs.entries[:0]...)"}},
		tests: []tests{{"./internal/exporter", []string{"TestExportCarriesReferrers"}, nil}},
	},
	{
		name: "release-registry-open",
		// The registry a release signs through serves anyone: another
		// local user who finds its port pushes a referrer, which the
		// release copies back and signs into its SHA256SUMS.
		edits: []edit{{"tools/release/registry.go",
			"Handler: onlyWith(auth, h)",
			"Handler: h"}},
		tests: []tests{{"./tools/release", []string{"TestRegistryTakesOnlyItsCredential"}, nil}},
	},
	{
		name: "export-writes-incomplete-signature",
		// The export writes a signature manifest whose config the store
		// lost: containerd's importer makes its record incomplete.
		edits: []edit{{"internal/exporter/whole.go",
			"if held[c.Digest] {",
			"if held[c.Digest] || true {"}},
		tests: []tests{{"./internal/exporter", []string{"TestExportSignatureConfigLost"}, nil}},
	},
	{
		name: "stream-content-not-kept",
		// An archive read from standard input is kept under the lease
		// named by its digest without the blobs it was read under: once
		// that first lease goes, containerd's GC may take them, and heal
		// has nothing to restore from.
		edits: []edit{{"internal/pass/keepstream.go",
			"store.Store.AddToLease(ctx, st.Lease, store.leased())",
			"store.Store.AddToLease(ctx, st.Lease, nil)"}},
		tests: []tests{{"./internal/pass", []string{"TestKeepStream"}, nil}, {e2e, []string{"TestImportStdin"}, nil}},
	},
	{
		name: "registry-dir-link-followed",
		// A registry dir in --registry-config that is a symlink is opened
		// through the link: whoever planted quay.io -> DIR makes root write
		// DIR/hosts.toml.
		edits: []edit{{"internal/registries/write.go",
			"case st.Mode&unix.S_IFMT == unix.S_IFLNK && wanted:",
			"case false:"}, {"internal/registries/write.go",
			"unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC",
			"unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC"}},
		tests: []tests{{"./internal/registries", []string{"TestWriteRefusalLeavesNothing"}, nil}},
	},
	{
		name: "registry-config-others-may-write",
		// --registry-config is written whoever else may write it: another
		// local user points a registry at a mirror of their own.
		edits: []edit{{"internal/registries/apply.go",
			"opts.Check = func(dir string) error { return files.CheckPerms(\"registry config\", dir, uid) }",
			"opts.Check = func(dir string) error { _ = uid; return nil }"}},
		tests: []tests{{e2e, []string{"TestSecRegistryConfigOthersMayWrite"}, nil}},
	},
	{
		name: "policy-claim-taken-over",
		// A second agent with another policy takes the claim on the
		// namespace's policy from its holder: two agents run with two
		// policies, each deleting what the other names.
		edits: []edit{{"internal/runtime/containerd/policy.go",
			"case holder.By != p.By:",
			"case false && holder.By != p.By:"}},
		tests: []tests{{e2e, []string{"TestPolicyClaimedOnce"}, nil}},
	},
	{
		name: "operator-file-not-regular",
		// A file an operator names is read whatever it is: a kubelet
		// drop-in linked to /dev/zero is read up to its bound as if it
		// were a file, and a policy's key that is a named pipe is taken
		// for an empty one.
		edits: []edit{{"internal/files/file.go",
			"if st.Mode&syscall.S_IFMT != syscall.S_IFREG {",
			"if false {"}},
		tests: []tests{{"./internal/files", []string{"TestReadFile"}, nil}, {"./internal/kubelet", []string{"TestDropInBounds"}, nil}},
	},
	{
		name: "peer-list-file-obeyed",
		// The peer list's file is read as any pull list's and never
		// written back: a line added by hand under a running agent is
		// pulled, pinned and leased as the peer source.
		edits: []edit{
			{"internal/pass/pulls.go", "case own.Known:", "case own.Known && false:"},
			{"internal/agent/ownlist.go", "case errors.Is(err, fs.ErrNotExist) && len(l.refs) == 0:", "case true:"},
		},
		tests: []tests{{"./internal/agent", []string{"TestPeerListIsTheAgents"}, nil}, {e2e, []string{"TestPeerListIsTheAgents"}, nil}},
	},
	{
		name: "required-from-anyone",
		// PUT /required is taken without the reporter's token: any user of
		// the node, on loopback, chooses what holdfast run --pull-required
		// pulls, pins and leases, and what the node says is ready.
		edits: []edit{{"internal/server/auth.go",
			"if match := subtle.ConstantTimeCompare(got[:], want[:]); !ok || match != 1 {",
			"if match := subtle.ConstantTimeCompare(got[:], want[:]); false && (!ok || match != 1) {"}},
		tests: []tests{{"./internal/server", []string{"TestRequiredNeedsOwner"}, nil}, {e2e, []string{"TestSecRequiredOwner"}, nil}},
	},
	{
		name: "export-signed-only-ignored",
		// holdfast export --signed-only writes the images the signature
		// policy refuses all the same: an unsigned image leaves the node
		// in an archive said to hold signed images only.
		edits: []edit{{"internal/exporter/policy.go",
			"if !sel.SignedOnly || len(refused) == 0 {",
			"if true {"}},
		tests: []tests{{"./internal/exporter", []string{"TestExportPolicy"}, nil}, {e2e, []string{"TestExportUnderPolicy"}, nil}},
	},
	{
		name: "staged-with-no-nodes",
		// A set whose selector matches no node the agent runs on is
		// Staged: kubectl wait lets a rollout through that nothing staged.
		edits: []edit{{"internal/imageset/aggregate.go",
			"case n.Selected == 0:",
			"case n.Selected < 0:"}},
		tests: []tests{{"./internal/imageset", []string{"TestAggregate"}, nil}},
	},
	{
		name: "staged-while-failing",
		// A node whose pull failed counts as holding the image: the set is
		// Staged while a node lacks it.
		edits: []edit{{"internal/imageset/aggregate.go",
			"			staged = false\n			missing[img] = append(missing[img], n.Node)",
			"			staged = staged && s.Phase == Failed\n			missing[img] = append(missing[img], n.Node)"}},
		tests: []tests{{"./internal/imageset", []string{"TestAggregate"}, nil}},
	},
	{
		name: "waves-unbounded",
		// Every waiting node may pull at once, whatever maxConcurrent and
		// the holders: the one node that holds an image serves them all.
		edits: []edit{{"internal/imageset/waves.go",
			"free := min(maxConcurrent-pulling, len(holders)-busy)",
			"free := len(others) + 1"}},
		tests: []tests{{"./internal/imageset", []string{"TestWavesDoubling", "TestWavesBounded", "TestMayPull", "TestAdmitWaves"}, nil}},
	},
	{
		name: "waves-pull-from-nowhere",
		// A node pulls an image no node holds: in an air gap its pull
		// goes to an upstream it cannot reach, and fails.
		edits: []edit{{"internal/imageset/waves.go",
			"free := min(maxConcurrent-pulling, len(holders)-busy)",
			"free := min(maxConcurrent-pulling, max(len(holders), 1)-busy)"}},
		tests: []tests{{"./internal/imageset", []string{"TestMayPull", "TestWavesDoubling", "TestWavesBounded"}, nil}},
	},
	{
		name: "holders-never-rest",
		// A holder serves however many it served: the seed of a rollout
		// sends ⌈log2 N⌉ copies of each image over its link.
		edits: []edit{{"internal/imageset/waves.go",
			"	if len(from) == 0 {\n		return holders, len(pulling)",
			"	if true {\n		return holders, len(pulling)"}},
		tests: []tests{{"./internal/imageset", []string{"TestWavesDoubling", "TestWavesBounded"}, nil},
			{"./internal/reporter", []string{"TestStageSetsRestAHolderThatServedThree"}, nil}},
	},
	{
		name: "served-from-unsaid",
		// The agent does not say which holder served an image: no holder
		// is ever counted, none rests.
		edits: []edit{{"internal/agent/setstate.go",
			"img.From = s.sentTo[set.Name][ref]",
			"_ = s.sentTo[set.Name][ref]"}},
		tests: []tests{{"./internal/agent", []string{"TestSetsPullFromTheHolder"}, nil}},
	},
	{
		name: "sets-from-anyone",
		// PUT /sets is served without the owner's check: any local user
		// names ImageSets whose images holdfast run pulls, pins and leases.
		edits: []edit{{"internal/server/server.go",
			"	s.change(\"PUT /sets\", func(w http.ResponseWriter, r *http.Request) {",
			"	s.mux.HandleFunc(\"PUT /sets\", func(w http.ResponseWriter, r *http.Request) {"}},
		tests: []tests{{"./internal/server", []string{"TestSetsNeedsOwner"}, nil}, {e2e, []string{"TestSecRequiredOwner", "TestSetsUnderRun"}, nil}},
	},
}
