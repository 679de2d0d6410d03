package units

import "testing"

func TestList(t *testing.T) {
	for _, tc := range []struct {
		items []string
		max   int
		want  string
	}{
		{nil, 3, ""},
		{[]string{"a"}, 1, "a"},
		{[]string{"a", "b"}, 1, "a and 1 more"},
		{[]string{"a", "b", "c"}, 3, "a, b, c"},
		{[]string{"a", "b", "c", "d", "e"}, 3, "a, b, c and 2 more"},
	} {
		if got := List(tc.items, tc.max); got != tc.want {
			t.Errorf("List(%q, %d) = %q, want %q", tc.items, tc.max, got, tc.want)
		}
	}
	if More(0) != "" || More(-1) != "" || More(2) != " and 2 more" || Rest(4) != "and 4 more" {
		t.Errorf("More(0) %q, More(2) %q, Rest(4) %q", More(0), More(2), Rest(4))
	}
}
