package report

import (
	"encoding/json"
	"testing"
)

// TestRowsJSON: the agent's report and NodeImages list an image's fields in
// the order they always have, and none that only check says.
func TestRowsJSON(t *testing.T) {
	r := Required{Known: true, Counts: map[State]int{Missing: 2}, NotReady: Rows{
		{Ref: "docker.io/library/a:1", State: Missing, Target: "sha256:aa", Others: []string{"sha256:bb"}, UsedBy: []string{"Deployment a/a containers/a"},
			ForcedPull: &ForcedPull{Policy: "AlwaysVerify"}},
		{Ref: "docker.io/library/b:1", State: Missing, Pulling: true, PullError: "not found"},
	}}
	got, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"known":true,"ready":false,"counts":{"missing":2},"notReady":[` +
		`{"ref":"docker.io/library/a:1","usedBy":["Deployment a/a containers/a"],"state":"missing"},` +
		`{"ref":"docker.io/library/b:1","state":"missing","pulling":true,"pullError":"not found"}]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var back Required
	if err := json.Unmarshal(got, &back); err != nil || len(back.NotReady) != 2 || back.NotReady[1].PullError != "not found" || back.NotReady[0].UsedBy[0] != "Deployment a/a containers/a" {
		t.Errorf("read back: %v, %+v", err, back)
	}
	if got, _ := json.Marshal(Required{}); string(got) != `{"known":false,"ready":false,"counts":null}` {
		t.Errorf("an empty report: %s", got)
	}
}
