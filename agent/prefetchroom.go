package agent

import (
	"github.com/llmgw/llmgw/weights/fetch"
)

// roomOf is the agent's own Room: the cache filesystem's free bytes, less
// the cache's reserve (cache_reserve, by default 5% of the filesystem up to
// 10 GB, what a fetch of unknown length leaves free), less what every fetch
// a job waits for still has to write. It evicts nothing and plans on no
// eviction: a cache that is full of older models stays so, and the
// prefetch waits in state no-room.
func (a *Agent) roomOf(dir string) (int64, error) {
	r, err := fetch.RoomFor(dir)
	if err != nil {
		return 0, err
	}
	reserve := a.Config().CacheReserve
	switch {
	case reserve < 0:
		reserve = 0
	case reserve == 0:
		reserve = min(int64(float64(r.Total)*fetch.DefaultReserveShare), fetch.DefaultReserveMax)
	}
	var jobs int64
	a.mu.Lock()
	for _, fl := range a.flights {
		if fl.waiters > fl.prefetches && fl.fetch != nil && fl.fetch.total > fl.fetch.done {
			jobs += fl.fetch.total - fl.fetch.done
		}
	}
	a.mu.Unlock()
	return r.Free - reserve - jobs, nil
}
