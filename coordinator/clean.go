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
	r.GCHeld = clip(api.StripControl(r.GCHeld), maxErrorText)
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

// The redact functions show an answer's sources through
// api.RedactSource to a caller not trusted to fetch them (see
// Server.mayFetch): status and placement name the model's source and the
// fetches in progress, and both are as open as the catalog.

func redactFetch(f *api.FetchStatus) {
	if f != nil {
		f.Source = api.RedactSource(f.Source)
	}
}

func redactFabrics(fs []api.FabricPresence) {
	for i := range fs {
		for j := range fs[i].Fetching {
			redactFetch(&fs[i].Fetching[j])
		}
	}
}

func redactStatus(st *api.Status) {
	for i := range st.Models {
		st.Models[i].Model = st.Models[i].Model.MapSources(api.RedactSource)
		redactFabrics(st.Models[i].Fabrics)
	}
	for i := range st.Swarms {
		st.Swarms[i].Source = api.RedactSource(st.Swarms[i].Source)
	}
}

func redactModelNodes(st *api.ModelNodes) {
	st.Model = st.Model.MapSources(api.RedactSource)
	redactFabrics(st.Fabrics)
	for i := range st.Nodes {
		redactFetch(st.Nodes[i].Fetch)
	}
}

func redactPlacement(p *api.Placement) {
	p.Model = p.Model.MapSources(api.RedactSource)
	for i := range p.Nodes {
		redactFetch(p.Nodes[i].Fetch)
	}
}
