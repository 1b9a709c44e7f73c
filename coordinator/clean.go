package coordinator

import "github.com/llmgw/llmgw/api"

// stripReportText removes control characters from the free text of a
// report (see api.StripControl): it reaches every operator's terminal
// through status, and an agent, or anyone who can post as one, must not be
// able to rewrite that terminal or draw table rows into it. Paths and
// sources are names, not text: they are kept as sent and escaped where
// they are printed (api/table).
func stripReportText(r *api.Report) {
	r.ID = api.StripControl(r.ID)
	r.AgentVersion = api.StripControl(r.AgentVersion)
	for i := range r.Errors {
		r.Errors[i] = api.StripControl(r.Errors[i])
	}
	for i := range r.Weights {
		w := &r.Weights[i]
		w.Problem = api.StripControl(w.Problem)
		w.ModelID = api.StripControl(w.ModelID)
		w.Revision = api.StripControl(w.Revision)
	}
	for i := range r.Dirs {
		d := &r.Dirs[i]
		d.Error = api.StripControl(d.Error)
		d.FSType = api.StripControl(d.FSType)
	}
}
