package signature

import (
	"encoding/json"
	"testing"
)

func TestVerdictString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    Verdict
		want string
	}{
		{Verdict{State: Verified, By: "/etc/holdfast/keys/platform.pub"}, "verified by /etc/holdfast/keys/platform.pub"},
		{Verdict{State: Verified, By: "https://token.actions.githubusercontent.com https://github.com/example/app/.github/workflows/release.yml@refs/heads/main"},
			"verified by https://token.actions.githubusercontent.com https://github.com/example/app/.github/workflows/release.yml@refs/heads/main"},
		{Verdict{State: Unchecked}, "unchecked"},
		{Verdict{State: Unsigned, Reason: "no signature for sha256:abc"}, "unsigned: no signature for sha256:abc"},
		{Verdict{State: Invalid, Reason: "signature does not verify with /k.pub"}, "invalid: signature does not verify with /k.pub"},
		{Verdict{}, "no verdict"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestVerdictJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Verdict{State: Verified, By: "/k.pub"})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"state":"verified","by":"/k.pub"}` {
		t.Errorf("JSON %s", b)
	}
	var v Verdict
	if err := json.Unmarshal([]byte(`{"state":"unsigned","reason":"none"}`), &v); err != nil || v != (Verdict{State: Unsigned, Reason: "none"}) {
		t.Errorf("Unmarshal = %+v, %v", v, err)
	}
}

func TestRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state           State
		enforce, others bool // refused under enforce; under warn and the zero Mode
	}{
		{Verified, false, false},
		{Unchecked, false, false},
		{Unsigned, true, false},
		{Invalid, true, false},
		{"", true, false}, // no verdict is not a pass
		{"revoked", true, false},
	} {
		v := Verdict{State: tc.state}
		if got := Enforce.Refuses(v); got != tc.enforce {
			t.Errorf("enforce refuses %q: %v, want %v", tc.state, got, tc.enforce)
		}
		for _, m := range []Mode{Warn, ""} {
			if got := m.Refuses(v); got != tc.others {
				t.Errorf("%q refuses %q: %v, want %v", m, tc.state, got, tc.others)
			}
		}
	}
}
