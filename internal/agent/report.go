package agent

import "github.com/holdfast-project/holdfast/internal/report"

// Report is what GET /report tells: the summary of the last pass and heals,
// and the journal's events with a sequence number above after.
func (a *Agent) Report(after uint64) report.Report {
	ready, _ := a.Ready()
	rep := a.journal.Report(after, ready)
	rep.Required = a.required.forReport()
	rep.Sets = a.sets.forReport()
	rep.PeerMirror = a.cfg.PeerMirror
	return rep
}
