package pass

import (
	"errors"
	"fmt"

	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/source"
)

// Standing is what the pin and pull lists of the images dirs want as the
// files stand now, read by a command that unpins outside a pass (release, an
// import that replaces an earlier one), and by a pass for the lists it leaves
// for later while they are being written. A pass takes a new pattern or line
// in only when it reads the list; until then no lease says the list wants a
// name, so the leases alone would unpin what the list was just given.
type Standing struct {
	patterns []pattern.Pattern
	refs     map[string]bool
	// Err says which lists could not be read: what they want is not known,
	// so nothing may be unpinned on their account.
	Err error
}

// ReadStanding reads the pin and pull lists in dirs.
func ReadStanding(dirs []string, insecurePerms bool) Standing {
	scan := source.ScanWith(dirs, source.ScanOptions{InsecurePerms: insecurePerms})
	return standingOf(scan.Sources, scan.Errors)
}

// standingOf reads the pin and pull lists among srcs; errs are failures
// met finding them.
func standingOf(srcs []source.Source, errs []error) Standing {
	s := Standing{refs: map[string]bool{}}
	errs = append([]error{}, errs...)
	for _, src := range srcs {
		switch src.Kind {
		case source.PinList:
			pl, err := source.ReadPinList(src.Path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, p := range pl.Patterns {
				s.patterns = append(s.patterns, p.Pattern)
			}
		case source.PullList:
			pl, err := source.ReadPullList(src.Path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, e := range pl.Entries {
				s.refs[e.Ref] = true
			}
		}
	}
	if len(errs) > 0 {
		s.Err = fmt.Errorf("the lists of the images dirs could not all be read, so nothing is unpinned (a pass unpins what no source wants): %w", errors.Join(errs...))
	}
	return s
}

// Wants says whether a list wants the image name.
func (s Standing) Wants(name string) bool {
	if s.refs[name] {
		return true
	}
	for _, p := range s.patterns {
		if p.Match(name) {
			return true
		}
	}
	return false
}
