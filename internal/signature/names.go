package signature

import (
	"slices"
	"strings"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// A verdict belongs to the image, not to one of its names. An image (a
// target digest) is judged over every name it is given:
//
//   - a repo@digest name stands for the tags of its repository that name the
//     same image, and is judged under their rules (the worst of their
//     verdicts); only with no such tag, or when every such tag is unchecked,
//     is it judged under a rule of its own;
//   - when any name of the image is unsigned or invalid, every other name of
//     it takes that verdict, so that under enforce no name of a refused
//     image is made, whichever name a rule was written for.
//
// byImage applies this to names, all naming one image, given own: the
// verdict of a name under the rule that applies to it alone.
func byImage(names []string, own func(name string) Verdict) map[string]Verdict {
	names = slices.Clone(names)
	slices.SortFunc(names, func(a, b string) int {
		// Tags first, so that a refusal is told under a tag when there is one.
		if da, db := isDigestName(a), isDigestName(b); da != db {
			if da {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	names = slices.Compact(names)
	out := make(map[string]Verdict, len(names))
	tags := map[string][]string{} // by repository
	for _, n := range names {
		if !isDigestName(n) {
			out[n] = own(n)
			tags[oci.Repository(n)] = append(tags[oci.Repository(n)], n)
		}
	}
	for _, n := range names {
		if !isDigestName(n) {
			continue
		}
		v, as, ok := worst(tags[oci.Repository(n)], out)
		if !ok || v.State == Unchecked {
			out[n] = own(n)
			continue
		}
		out[n] = judgedAs(v, as)
	}
	v, as, ok := worst(names, out)
	if !ok || !refusable(v) {
		return out
	}
	for _, n := range names {
		if !refusable(out[n]) {
			out[n] = judgedAs(v, as)
		}
	}
	return out
}

// worst is the verdict among those of names that tells most against the
// image: an unsigned or invalid one first, then a verified one, then an
// unchecked one; and the name it is the verdict of.
func worst(names []string, verdicts map[string]Verdict) (Verdict, string, bool) {
	rank := func(v Verdict) int {
		switch {
		case refusable(v):
			return 0
		case v.State == Verified:
			return 1
		default:
			return 2
		}
	}
	var best Verdict
	var as string
	found := false
	for _, n := range names {
		v := verdicts[n]
		if !found || rank(v) < rank(best) {
			best, as, found = v, n, true
		}
	}
	return best, as, found
}

// refusable says whether a verdict is one that enforce refuses.
func refusable(v Verdict) bool {
	return v.State == Unsigned || v.State == Invalid
}

// judgedAs is v, the verdict of the image under the name as, for another of
// its names.
func judgedAs(v Verdict, as string) Verdict {
	suffix := "the image as " + as
	if v.Reason == "" {
		v.Reason = suffix
	} else {
		v.Reason += " (" + suffix + ")"
	}
	return v
}

func isDigestName(name string) bool { return strings.Contains(name, "@") }
