package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api/munge"
)

// defaultPeerRetry is how often the agent tries its chunk server's address
// again while it cannot listen there.
const defaultPeerRetry = 10 * time.Second

// startPeerServer serves the node's chunk server on its peer address until
// ctx ends. An address it cannot listen on does not stop the agent: the
// peer port is unprivileged (8421), so any user of the node can listen on
// it first, and an agent that exited on it (issue 24, item 10) left the
// node's hooks without their agent. The agent runs on without a chunk
// server: it says why in its log, its status, its errors (which the
// coordinator shows) and llmgw_agent_peer_server_up; it does not offer
// itself to the fabric (its reports carry no peer address) and fetches
// from the origin itself (whyNoSwarm); and it tries the address again
// every peerRetry, serving from the moment it can.
func (a *Agent) startPeerServer(ctx context.Context, cfg Config, wg *sync.WaitGroup) {
	if a.swarm.addr == "" {
		return
	}
	if cfg.MungeSocket == "" {
		a.notServing("peer_addr is set but munge_socket is not: peers authenticate with MUNGE, so this node serves no chunks and fetches from the origin; set munge_socket")
		return
	}
	ps := newPeerServer(a.swarm.addr, cfg.Fabric, munge.New(cfg.MungeSocket), cfg.CacheDir, &a.swarm.files)
	ps.onServed = func(n int64) { a.metrics.swarmServed.Add(float64(n)) }
	ps.onDropped = func(sum string, h *held) { go a.withdraw(sum, h) }
	srv := &http.Server{Handler: ps, ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() {
		<-ctx.Done()
		srv.Close()
	})
	// The first try before the first report, so that it carries the
	// address; the next ones in the background.
	l, err := a.listenPeers()
	wg.Go(func() {
		for err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(a.peerRetry):
			}
			if l, err = a.listenPeers(); err == nil {
				// The coordinator learns the address from the next report.
				a.kick(kickReport)
			}
		}
		srv.Serve(l)
	})
}

// listenPeers listens on the peer address and records the outcome.
func (a *Agent) listenPeers() (net.Listener, error) {
	l, err := net.Listen("tcp", a.swarm.addr)
	if err != nil {
		a.notServing(fmt.Sprintf("peer chunk server on %s (peer_addr/peer_interface): %v: another process holds the address (ss -ltnp names it); this node serves no chunks and fetches from the origin itself; trying again every %v", a.swarm.addr, err, a.peerRetry))
		return nil, err
	}
	a.mu.Lock()
	a.swarm.notServing = ""
	a.mu.Unlock()
	a.swarm.serving.Store(true)
	a.metrics.peerServerUp.Set(1)
	a.log.WithField("addr", a.swarm.addr).Info("serving verified chunks to the fabric at /v1/chunks/")
	return l, nil
}

// notServing records why the chunk server does not serve: logged and kept
// among the errors the reports carry when it changes, always in status.
func (a *Agent) notServing(why string) {
	a.swarm.serving.Store(false)
	a.metrics.peerServerUp.Set(0)
	a.mu.Lock()
	same := a.swarm.notServing == why
	a.swarm.notServing = why
	a.mu.Unlock()
	a.recordError(why)
	if !same {
		a.log.Warn(why)
	}
}
