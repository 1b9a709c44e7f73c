package fetch

import (
	"net/url"
	"time"
)

// What a download tells the outside while it runs: progress for the
// caller, and URLs fit for a log line.

// reportProgress calls OnProgress every ProgressInterval from one goroutine,
// and once more when stopped.
func (d *download) reportProgress() (stop func()) {
	if d.f.OnProgress == nil {
		return func() {}
	}
	report := func() {
		if d.rem.progress != nil {
			d.rem.progress(d.done.Load(), d.total.Load())
			return
		}
		d.f.OnProgress(Progress{Source: d.rem.source, Done: d.done.Load(), Total: d.total.Load()})
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d.f.progressInterval())
		defer t.Stop()
		for {
			select {
			case <-quit:
				report()
				return
			case <-t.C:
				report()
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// redactURL is u without what may be a credential: the user info, the query
// (where presigned URLs carry their signature) and the fragment.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	p.User, p.RawQuery, p.Fragment = nil, "", ""
	return p.String()
}
