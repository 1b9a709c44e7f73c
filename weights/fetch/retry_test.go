package fetch

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestSpeedCheckStaysStoppedAfterClose: the speed timer can fire just as
// Close stops it; the check it runs then must not re-arm it, or it fires
// every idle window for ever and keeps the response alive. The interleaving
// is forced, not waited for: Close first, then the check that was already
// running when the timer fired.
func TestSpeedCheckStaysStoppedAfterClose(t *testing.T) {
	o := newFakeOrigin(t, 1024)
	resp, err := http.Get(o.srv.URL + "/model.gguf")
	if err != nil {
		t.Fatal(err)
	}
	_, cancel := context.WithCancel(context.Background())
	b := &body{resp: resp, cancel: cancel, idle: time.Hour, minSpeed: 1}
	b.timer = time.AfterFunc(b.idle, cancel)
	b.watchSpeed()

	b.Close()
	b.checkSpeed() // the fire that began before Close stopped the timer
	b.speedMu.Lock()
	rearmed := b.speed.Stop()
	b.speedMu.Unlock()
	if rearmed {
		t.Error("the speed check re-armed its timer after Close")
	}
}
