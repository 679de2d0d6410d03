package cli

import (
	"testing"
)

// TestNamespaceUse: the commands that name and pin images (sync, import,
// and run, which also claims the namespace for its policy) say so, and
// judge by the signature policy in force; every other command only reads.
func TestNamespaceUse(t *testing.T) {
	want := map[string]string{"run": "claims", "sync": "writes", "import": "writes"}
	for _, cmd := range New("test", "").Commands() {
		if got := cmd.Annotations[useAnnotation]; got != want[cmd.Name()] {
			t.Errorf("holdfast %s uses the namespace as %q, want %q", cmd.Name(), got, want[cmd.Name()])
		}
	}
}
