package bench

import (
	"slices"
	"strings"
	"testing"
)

func TestOnlyP8(t *testing.T) {
	t.Parallel()
	if !slices.Contains(Groups(), "P8") {
		t.Fatalf("Groups() = %v, without P8", Groups())
	}
	c := Config{Tools: Tools{Holdfast: "h", Ctr: "c"}, Set: FullSet(), Rounds: 3, ZstdWindow: 8 << 20, Only: strings.Split("P8", ",")}
	if err := c.Validate(); err != nil {
		t.Fatalf("-only P8: %v", err)
	}
	if !c.runs("P8") || c.runs("P1") || c.runs("P4") {
		t.Errorf("-only P8 runs P8 %v, P1 %v, P4 %v", c.runs("P8"), c.runs("P1"), c.runs("P4"))
	}
	c.Only = []string{"P8", "P7"}
	if err := c.Validate(); err != nil {
		t.Errorf("-only P8,P7: %v", err)
	}
}

func TestImportArgsNameTheWritePath(t *testing.T) {
	t.Parallel()
	args := importArgs("/run/c.sock", "/d", "/a.tar")
	want := []string{"import", "--address", "/run/c.sock", "--write-path", WriteDirect, "--data-dir", "/d", "/a.tar"}
	if !slices.Equal(args, want) {
		t.Errorf("importArgs = %q, want %q", args, want)
	}
}

// The peer method's stat splits its median into A's import and B's pull and
// pin; the report divides it by the import on B and says so.
func TestP8Stats(t *testing.T) {
	t.Parallel()
	samples := []Sample{
		{Scenario: ScenarioP8, Method: MethodPeer, Round: 1, Seconds: 12, ImportSeconds: 8, ClientCPUSeconds: 9},
		{Scenario: ScenarioP8, Method: MethodImportOnB, Round: 1, Seconds: 5, ClientCPUSeconds: 4},
		{Scenario: ScenarioP8, Method: MethodPeer, Round: 2, Seconds: 10, ImportSeconds: 7, ClientCPUSeconds: 8},
		{Scenario: ScenarioP8, Method: MethodImportOnB, Round: 2, Seconds: 4, ClientCPUSeconds: 3},
		{Scenario: ScenarioP8, Method: MethodPeer, Round: 3, Seconds: 20, ImportSeconds: 9, ClientCPUSeconds: 10},
		{Scenario: ScenarioP8, Method: MethodImportOnB, Round: 3, Error: "boom"},
	}
	stats := computeStats(samples)
	peer, local := findStat(stats, ScenarioP8, MethodPeer), findStat(stats, ScenarioP8, MethodImportOnB)
	if peer == nil || local == nil {
		t.Fatalf("stats = %+v", stats)
	}
	if peer.N != 3 || peer.Median != 12 || peer.ImportMedian != 8 || peer.AfterImportMedian != 4 || peer.ClientCPU != 9 {
		t.Errorf("peer stat = %+v", *peer)
	}
	if local.N != 2 || local.Failed != 1 || local.Median != 4.5 || local.ImportMedian != 0 || local.AfterImportMedian != 0 {
		t.Errorf("import stat = %+v", *local)
	}
	if b := baseline(stats, *peer); b == nil || b.Method != MethodImportOnB {
		t.Errorf("P8 baseline = %+v", b)
	}
	note := peerNote(stats)
	for _, want := range []string{"P8: 12.0 s (median)", "A's import 8.00 s", "its pin 4.00 s"} {
		if !strings.Contains(note, want) {
			t.Errorf("peerNote lacks %q: %s", want, note)
		}
	}
	if peerNote(computeStats(samples[1:2])) != "" {
		t.Errorf("a note without the peer row")
	}
	var b strings.Builder
	if err := WriteReport(&b, &Results{Stats: stats}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| 2.67×") || !strings.Contains(b.String(), "in P8, ÷ the import on B") {
		t.Errorf("the report does not divide the peer method by the import on B:\n%s", b.String())
	}
}
