package agent

// The origin as a CDN serves it (issue 24, item 6): edges that give the
// same bytes different ETags.

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// edgeOrigin serves one file as a CDN whose every answer comes from
// another edge, with its own ETag, honouring If-Range as an edge does (an
// ETag not its own: the whole file, 200); its first answer breaks off
// after cut bytes, so that the reader resumes.
type edgeOrigin struct {
	url  string
	data []byte
	cut  int

	busy sync.WaitGroup // requests being answered
	mu   sync.Mutex
	n    int
	// answers are "status If-Range", in the order the requests came: a
	// whole-file 200 the reader drops can end after the read that follows
	// it, so they are not appended as they end.
	answers []string
}

func newEdgeOrigin(t *testing.T, data []byte, cut int) *edgeOrigin {
	o := &edgeOrigin{data: data, cut: cut}
	o.url = serveOrigin(t, o)
	return o
}

func (o *edgeOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.busy.Add(1)
	defer o.busy.Done()
	o.mu.Lock()
	o.n++
	n := o.n
	o.mu.Unlock()
	w.Header().Set("ETag", fmt.Sprintf(`"edge-%d"`, n))
	var out http.ResponseWriter = w
	if n == 1 {
		out = &cutWriter{ResponseWriter: w, left: o.cut}
	}
	sw := &statusWriter{ResponseWriter: out}
	defer func() {
		o.mu.Lock()
		for len(o.answers) < n {
			o.answers = append(o.answers, "")
		}
		o.answers[n-1] = fmt.Sprintf("%d If-Range %q", sw.status, r.Header.Get("If-Range"))
		o.mu.Unlock()
	}()
	http.ServeContent(sw, r, "model.bin", time.Unix(1e9, 0), bytes.NewReader(o.data))
}

// cutWriter ends the connection once left bytes are written.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if len(p) >= c.left {
		c.ResponseWriter.Write(p[:c.left])
		http.NewResponseController(c.ResponseWriter).Flush()
		panic(http.ErrAbortHandler)
	}
	c.left -= len(p)
	return c.ResponseWriter.Write(p)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// TestSwarmOriginEdgesGiveOtherETags: the seed's origin read breaks off
// and it resumes with If-Range and the ETag of the first edge; the next
// edge has another ETag and answers with the whole file. On main the fetch
// failed, saying the origin changed; now the validator is dropped, the
// range asked for again, and the file verified against its pin.
func TestSwarmOriginEdgesGiveOtherETags(t *testing.T) {
	realm := mungetest.New(t)
	data, sum := testData(t, 8*faultChunk+999)
	e := emptyFabric(t, realm, data, sum, faultChunk)
	e.url = startCoordinator(t, realm, map[string]string{"n181": "127.0.0.181"}, faultChunk)
	o := newEdgeOrigin(t, data, 3*faultChunk+100)
	e.o = &fOrigin{e: e, url: o.url, byNode: map[string]int64{}}
	// A catalog file, so the node gets a plan and is the swarm's seed;
	// without it every plan is refused and the node reads the origin alone
	// after 10 s, by another path than the one under test.
	addCatalogFile(t, e.url, o.url, sum, int64(len(data)))
	n := e.startNode(181)
	n.fetch(t)
	n.wait(t, 30*time.Second)
	o.busy.Wait() // a dropped 200 may still be ending
	o.mu.Lock()
	defer o.mu.Unlock()
	t.Logf("origin answers: %v", o.answers)
	if len(o.answers) < 3 || o.answers[1] != `200 If-Range "\"edge-1\""` || o.answers[2] != `206 If-Range ""` {
		t.Errorf("origin answers %v; want the resumed read's If-Range answered with the whole file, then a read without it", o.answers)
	}
}
