package pass

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	"github.com/holdfast-project/holdfast/internal/signature"
)

// signatures is what a Runner keeps of the signature policy between passes.
type signatures struct {
	// judge holds the last good policy (nil: none) and the verdicts it
	// reached, which a policy file read again unchanged keeps.
	judge  signature.Judge
	badErr string // the last reload's error, reported once
	// said are the warnings given once: records of refused images holdfast
	// did not make, sources imported before signatures were kept.
	said map[string]bool
}

// loadPolicy reads the policy file again before a pass. A bad file keeps
// the last good policy, and says so once per mistake; with no good policy
// yet, the pass fails with the file's mistakes.
func (p *Runner) loadPolicy(sum *Summary) {
	if p.cfg.Policy == "" {
		return
	}
	pol, err := signature.Reload(p.sigs.judge.Policy, p.cfg.Policy, signature.Options{InsecurePerms: p.cfg.InsecurePerms})
	p.sigs.judge.Policy = pol
	if err == nil {
		p.sigs.badErr = ""
		return
	}
	if pol == nil {
		sum.Failures = append(sum.Failures, fmt.Errorf("signature policy: %w", err))
		return
	}
	if msg := err.Error(); msg != p.sigs.badErr {
		p.sigs.badErr = msg
		p.log.Warn("the signature policy file is bad: keeping the last good policy", "policy", p.cfg.Policy, "error", msg)
		p.journal.Record(journal.Warning, journal.ReasonPolicy, fmt.Sprintf("signature policy %s is bad, the last good one stays in force: %v", p.cfg.Policy, errors.Join(err)))
	}
}

// verdictsOf are the verdicts on the names a plan wants, and on those it
// refuses; nil without a judgment (no policy).
func verdictsOf(plan reconcile.Plan, g *signature.Judgment) map[string]signature.Verdict {
	if g == nil {
		return nil
	}
	out := map[string]signature.Verdict{}
	for name, w := range plan.WantedNames {
		if w.Signs == "" { // a record of an image's signatures is no image
			out[name] = g.Of(name, w.Target)
		}
	}
	for _, r := range plan.Refusals {
		if _, ok := out[r.Name]; !ok {
			out[r.Name] = g.Of(r.Name, ocispec.Descriptor{Digest: digest.Digest(r.Target)})
		}
	}
	return out
}

// reportSignatures counts the verdicts (the metric), warns of each image a
// rule applies to that is not verified, and fails each source whose image
// the policy refuses, naming the image and why.
func (p *Runner) reportSignatures(plan reconcile.Plan, verdicts map[string]signature.Verdict, sum *Summary) {
	// What this pass refused, and nothing else: a policy taken away takes
	// its refusals with it.
	refusals := map[string]string{}
	for _, r := range plan.Refusals {
		refusals[r.Name] = r.Reason
	}
	p.mu.Lock()
	p.refusals = refusals
	p.mu.Unlock()
	if verdicts == nil {
		return
	}
	counts := map[string]int{}
	refused := refusedNames(plan)
	for name, v := range verdicts {
		if strings.Contains(name, "@") {
			continue // its image is counted by its tag
		}
		counts[string(v.State)]++
		if v.State == signature.Unsigned || v.State == signature.Invalid {
			if !refused[name] {
				p.log.Warn("an image the signature policy applies to is not verified (mode warn: pinned all the same)", "name", name, "signature", v.String())
			}
		}
	}
	p.rec.SetSignatures(counts)
	for _, n := range plan.Foreign {
		if p.sigs.once("foreign " + n) {
			msg := fmt.Sprintf("record %s names an image the signature policy refuses; holdfast did not make it, and leaves it as it is", n)
			p.log.Warn(msg)
			p.journal.Record(journal.Warning, journal.ReasonPolicy, msg)
		}
	}
	for _, r := range reconcile.Tagged(plan.Refusals) {
		if strings.HasSuffix(r.Reason, signature.ImportedBeforeSignatures) && p.sigs.once("unrecorded "+r.Lease) {
			msg := fmt.Sprintf("%s was imported by a holdfast that did not keep signatures, and its archive is not read again: release it and import it again (docs/signatures.md)", r.Source)
			p.log.Warn(msg, "lease", r.Lease)
			p.journal.Record(journal.Warning, journal.ReasonPolicy, msg)
		}
		cause := fmt.Errorf("image %s refused by the signature policy: %s", r.Name, r.Reason)
		sum.Failures = append(sum.Failures, sourceFailed(r.Source, cause, fmt.Errorf("%s: %w", r.Source, cause)))
		p.log.Error("refused", "name", r.Name, "target", r.Target, "source", r.Source, "signature", r.Reason)
	}
}

// Refusal is why the signature policy refused the image a source wants as
// name, as of the last pass; "" when it did not.
func (p *Runner) Refusal(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusals[name]
}

func refusedNames(plan reconcile.Plan) map[string]bool {
	out := map[string]bool{}
	for _, r := range plan.Refusals {
		out[r.Name] = true
	}
	return out
}

// once reports whether key is said for the first time.
func (s *signatures) once(key string) bool {
	if s.said[key] {
		return false
	}
	if s.said == nil {
		s.said = map[string]bool{}
	}
	s.said[key] = true
	return true
}
