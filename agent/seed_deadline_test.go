package agent

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// TestSeedAskEndsWhenStuck: a seed ask ran with context.Background(), so a
// seed whose fetch could not move never ended, and every later ask for its
// source was ignored until the agent restarted (issue 24). Here the origin
// answers every range with headers and then nothing: the seed (through the
// swarm, with the real coordinator) must end once nothing has landed for
// fetch_deadline, and the next ask must start a fetch again.
func TestSeedAskEndsWhenStuck(t *testing.T) {
	realm := mungetest.New(t)
	data, sum := testData(t, 2<<20)
	var gets atomic.Int32
	source := serveOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Range", "bytes 0-"+strconv.Itoa(len(data)-1)+"/"+strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusPartialContent)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))

	e := emptyFabric(t, realm, data, sum, api.DefaultChunkSize)
	e.url = startCoordinator(t, realm, map[string]string{"n205": "127.0.0.205"}, 0)
	addCatalogFile(t, e.url, source, sum, int64(len(data)))
	const deadline = 2 * time.Second
	a := startSwarmAgentWith(t, e, 205, 0, func(a *Agent) { a.cfg.FetchDeadline = deadline })
	seeding := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.seeding[source]
	}
	ask := []api.SeedAsk{{Model: "m", Source: source, SHA256: sum, Size: int64(len(data))}}
	start := time.Now()
	a.seed(t.Context(), ask)
	until(t, 5*time.Second, "the seed's fetch asked the origin", func() bool { return gets.Load() > 0 })
	until(t, deadline+5*time.Second, "the stuck seed ended", func() bool { return !seeding() })
	t.Logf("the stuck seed ended %v after the ask", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d < deadline {
		t.Errorf("the seed ended after %v, before fetch_deadline (%v)", d, deadline)
	}
	before := gets.Load()
	a.seed(t.Context(), ask)
	until(t, 5*time.Second, "the next ask fetched again", func() bool { return gets.Load() > before })
}
