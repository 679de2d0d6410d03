package units

import (
	"fmt"
	"strings"
)

// Rest says how many items a list leaves out: "and 3 more".
func Rest(n int) string { return fmt.Sprintf("and %d more", n) }

// More is Rest after a list that leaves n items out, " and 3 more"; ""
// when it leaves none.
func More(n int) string {
	if n <= 0 {
		return ""
	}
	return " " + Rest(n)
}

// List is the first max items joined with ", ", and More of the others:
// "a, b and 3 more".
func List(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + More(len(items)-max)
}
