package report

import "encoding/json"

// Image is an image on a node and where it stands there: the one row of
// holdfast check, check --cluster, the agent's report and the node's
// NodeImages object. Each says what it knows: Target and Others are
// check's, ForcedPull check's with a kubelet configuration, Pulling and
// PullError the agent's.
type Image struct {
	Ref   string `json:"ref"`
	State State  `json:"state"`
	// Target is the digest the record of that name points at.
	Target string `json:"target,omitempty"`
	// Others are, for a mismatch, the digests the node holds the
	// repository at.
	Others []string `json:"others,omitempty"`
	// UsedBy are the uses of the image: "Deployment shop/web
	// containers/web".
	UsedBy []string `json:"usedBy,omitempty"`
	// ForcedPull says the kubelet would pull the image although the node
	// holds it: its configuration has it verify the pull credentials of
	// images it did not pull itself.
	ForcedPull *ForcedPull `json:"forcedPull,omitempty"`
	// Pulling: the agent pulls it from the node's peers (holdfast run
	// --pull-required); PullError is why its last pull failed, while it
	// waits to be tried again.
	Pulling   bool   `json:"pulling,omitempty"`
	PullError string `json:"pullError,omitempty"`
}

// ForcedPull is why the kubelet would pull an image the node holds, and
// what to change.
type ForcedPull struct {
	// Policy is the kubelet's imagePullCredentialsVerificationPolicy
	// (AlwaysVerify, NeverVerifyAllowlistedImages); From the file that sets
	// it.
	Policy string `json:"policy"`
	From   string `json:"from,omitempty"`
	// PullPolicies are those of the uses concerned: IfNotPresent (the
	// kubelet pulls, which fails where no registry answers), Never (it
	// refuses to start the container: ErrImageNeverPull).
	PullPolicies []string `json:"pullPolicies"`
	UsedBy       []string `json:"usedBy"`
	// Allowlist are the entries of preloadedImagesVerificationAllowlist
	// that would exempt it: the names as the uses write them, without tag
	// or digest.
	Allowlist []string `json:"allowlist"`
	Message   string   `json:"message"`
}

// Rows are images as the agent's report and NodeImages list them: each
// written as a Row, the fields in the order they have always had there, and
// only those.
type Rows []Image

// Row is an image of Rows as it is written: what the agent knows of it.
type Row struct {
	Ref       string   `json:"ref"`
	UsedBy    []string `json:"usedBy,omitempty"`
	State     State    `json:"state"`
	Pulling   bool     `json:"pulling,omitempty"`
	PullError string   `json:"pullError,omitempty"`
}

// MarshalJSON writes rs as Rows.
func (rs Rows) MarshalJSON() ([]byte, error) {
	if rs == nil {
		return []byte("null"), nil
	}
	out := make([]Row, len(rs))
	for i, img := range rs {
		out[i] = Row{Ref: img.Ref, UsedBy: img.UsedBy, State: img.State, Pulling: img.Pulling, PullError: img.PullError}
	}
	return json.Marshal(out)
}
