package signature

// State is the outcome of checking an image's signatures against the policy.
type State string

const (
	Unchecked State = "unchecked" // no rule matches the image (or there is no policy)
	Verified  State = "verified"  // a signature verifies by the rule's keys or identities
	Unsigned  State = "unsigned"  // a rule matches, and the image carries no signature
	Invalid   State = "invalid"   // a rule matches, and no signature the image carries verifies
)

// Verdict is the outcome for one image.
type Verdict struct {
	State State `json:"state"`
	// By is what verified the image: a key's path, or a keyless identity as
	// "issuer subject". Empty unless State is Verified.
	By string `json:"by,omitempty"`
	// Reason says why, for any State: which rule matched, what failed.
	Reason string `json:"reason,omitempty"`
}

// String is the state, then " by " By and ": " Reason when they are set:
// "verified by /etc/holdfast/keys/platform.pub", "unsigned: no signature".
func (v Verdict) String() string {
	s := string(v.State)
	if s == "" {
		s = "no verdict"
	}
	if v.By != "" {
		s += " by " + v.By
	}
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	return s
}
