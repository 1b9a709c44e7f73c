// Command liar is the fan-out benchmark's hostile member (fanout.sh
// --liars, issue 24): one node of a fabric that speaks the report, swarm
// and chunk protocols with that node's own munged, which is what root on
// that node can do and nothing more, and misbehaves in turn in each of the
// ways issue 24's review found:
//
//	fake-lease       the first to ask, it holds the lease and says it reads
//	                 (+1 MiB of origin bytes every 200 ms), claiming no chunk
//	                 and publishing no digest (item 6)
//	squat            reports of the file with its size one byte over, and
//	                 with chunks four times the swarm's (items 6, 7, 9)
//	complete-503     claims the whole file, with made-up digests, and
//	                 answers every chunk request 503 (item 3)
//	made-up-digests  claims the whole file with made-up digests and serves
//	                 random bytes (item 8)
//	slow-readers     reads a chunk from every honest peer on every upload
//	                 slot at 100 B/s (item 4)
//	forged-holder    the lease holder with made-up digests, serving bytes
//	                 that match them (not in the default cycle: only the
//	                 whole file tells, and the fabric reads the file twice)
//
// It runs the opening behaviour (--open) until it has held and lost the
// lease (or for --open-for at most), then the cycle (--cycle) from --offset,
// each for --phase, until SIGTERM, and then writes what it did and what it
// was told to --out as KEY=VALUE lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/swarmtest"
)

func main() {
	var (
		coord    = flag.String("coordinator", "", "the coordinator's URL")
		sock     = flag.String("munge-socket", "", "this node's munged's socket")
		node     = flag.String("node", "", "this node's name, as Slurm lists it")
		fabric   = flag.String("fabric", "", "this node's fabric")
		listen   = flag.String("listen", "", "host:port of its chunk server on the fabric, reported as its peer_addr")
		source   = flag.String("source", "", "the catalog file's source")
		sum      = flag.String("sha256", "", "its pinned sha256")
		size     = flag.Int64("size", 0, "its size in bytes")
		chunk    = flag.Int64("chunk-size", api.DefaultChunkSize, "the swarm's chunk size")
		open     = flag.String("open", "fake-lease", "the opening behaviour, before any other member asks; empty for none")
		openFor  = flag.Duration("open-for", 20*time.Second, "how long the opening behaviour lasts at most")
		cycle    = flag.String("cycle", "squat,complete-503,made-up-digests,slow-readers", "the behaviours cycled through after the opening")
		offset   = flag.Int("offset", 0, "the cycle's first behaviour")
		phase    = flag.Duration("phase", 8*time.Second, "how long each behaviour of the cycle lasts")
		out      = flag.String("out", "", "write what it did here at the end (KEY=VALUE lines)")
		readyOut = flag.String("ready", "", "write this file once it has reported and its chunk server listens")
	)
	flag.Parse()
	if *coord == "" || *sock == "" || *node == "" || *listen == "" || *source == "" || *sum == "" || *size <= 0 {
		fmt.Fprintln(os.Stderr, "liar: --coordinator, --munge-socket, --node, --listen, --source, --sha256 and --size are needed")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	codec := munge.New(*sock)
	l := &liar{codec: codec, node: *node, fabric: *fabric, sum: *sum, size: *size, chunk: *chunk, did: map[string]int{},
		m: &swarmtest.Member{Node: *node, Fabric: *fabric, Addr: *listen, Coord: &api.Client{BaseURL: *coord, Auth: munge.Authenticator{Codec: codec}},
			Source: *source, SHA256: *sum, Size: *size, ChunkSize: *chunk, Every: 200 * time.Millisecond}}
	if *open != "" {
		l.become(*open)
	} else {
		l.become("idle")
	}
	if err := l.m.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "liar %s: %v\n", *node, err)
		os.Exit(1)
	}
	// Ready once the coordinator has answered it: it asked before any
	// honest member.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if plans, _, _ := l.m.Plans(); plans > 0 {
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	if *readyOut != "" {
		os.WriteFile(*readyOut, []byte("ready\n"), 0o644)
	}
	if *open != "" {
		l.opening(ctx, *openFor)
	}
	names := strings.Split(*cycle, ",")
	for k := *offset; ctx.Err() == nil && len(names) > 0; k++ {
		l.run(ctx, names[k%len(names)], *phase)
	}
	<-l.m.Done()
	if *out != "" {
		if err := os.WriteFile(*out, []byte(l.summary()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "liar %s: %v\n", *node, err)
			os.Exit(1)
		}
	}
}

type liar struct {
	m                  *swarmtest.Member
	codec              munge.Codec
	node, fabric, sum  string
	size, chunk        int64
	mu                 sync.Mutex
	did                map[string]int // per behaviour, how many times it began
	order              []string
	slowServed, slowNo int
	slowHeld           time.Duration
}

// become sets the member's claims and answers to behaviour b's.
func (l *liar) become(b string) {
	l.mu.Lock()
	l.did[b]++
	l.order = append(l.order, b)
	l.mu.Unlock()
	l.m.Update(func(m *swarmtest.Member) {
		m.Size, m.ChunkSize = l.size, l.chunk
		m.Complete, m.HaveNone, m.MadeUpSums, m.FakeOriginBytes = false, false, false, 0
		m.Serve = swarmtest.Serve503
		switch b {
		case "idle":
			m.HaveNone = true
		case "fake-lease":
			m.HaveNone, m.FakeOriginBytes = true, 1<<20
		case "squat":
			// Every other report one byte over, the others in chunks four
			// times the swarm's with chunks marked: both refused.
			m.Size++
		case "complete-503":
			m.Complete, m.MadeUpSums = true, true
		case "made-up-digests":
			m.Complete, m.MadeUpSums, m.Serve = true, true, swarmtest.ServeJunk
		case "slow-readers":
			// It keeps claiming the file, and answers 503.
			m.Complete, m.MadeUpSums = true, true
		case "forged-holder":
			m.MadeUpSums, m.Serve, m.FakeOriginBytes = true, swarmtest.ServeForged, 1<<20
		default:
			fmt.Fprintf(os.Stderr, "liar: unknown behaviour %q\n", b)
			os.Exit(2)
		}
	})
}

// opening runs the opening behaviour until the member has held the lease
// and lost it, or for at most d.
func (l *liar) opening(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	held := false
	for ctx.Err() == nil && time.Now().Before(end) {
		p := l.m.LastPlan()
		if p.Lease {
			held = true
		} else if held {
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// run is behaviour b for d.
func (l *liar) run(ctx context.Context, b string, d time.Duration) {
	l.become(b)
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	switch b {
	case "squat":
		for big := false; pctx.Err() == nil; big = !big {
			l.m.Update(func(m *swarmtest.Member) {
				m.Size, m.ChunkSize = l.size+1, l.chunk
				if big {
					m.Size, m.ChunkSize = l.size, 4*l.chunk
				}
			})
			sleep(pctx, 500*time.Millisecond)
		}
	case "slow-readers":
		l.slowReaders(pctx)
	}
	<-pctx.Done()
}

// slowReaders holds every upload slot of every honest peer its plan lists
// with readers of one chunk the peer holds, read at 100 B/s, again and
// again until ctx ends.
func (l *liar) slowReaders(ctx context.Context) {
	for ctx.Err() == nil {
		p := l.m.LastPlan()
		chunk := p.ChunkSize
		if chunk <= 0 {
			chunk = l.chunk
		}
		n := int((l.size + chunk - 1) / chunk)
		var wg sync.WaitGroup
		for _, peer := range p.Peers {
			i := -1
			for k := range n {
				if peer.Holds(k) {
					i = k
					break
				}
			}
			if i < 0 {
				continue
			}
			from := int64(i) * chunk
			to := min(from+chunk, l.size) - 1
			wg.Go(func() {
				for _, r := range swarmtest.SlowReads(ctx, l.codec, l.node, l.fabric, peer.Addr, l.sum, from, to, 8, 100) {
					l.mu.Lock()
					if r.Status == 206 {
						l.slowServed++
						l.slowHeld = max(l.slowHeld, r.Held)
					} else {
						l.slowNo++
					}
					l.mu.Unlock()
				}
			})
		}
		wg.Wait()
		sleep(ctx, 200*time.Millisecond)
	}
}

func (l *liar) summary() string {
	plans, leases, _ := l.m.Plans()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "node=%s\nfabric=%s\nbehaviours=%s\nplans=%d\nleases=%d\nrefused_reports=%d\n",
		l.node, l.fabric, strings.Join(l.order, ","), plans, leases, l.m.Refused())
	answers := l.m.Answers()
	codes := make([]int, 0, len(answers))
	for c := range answers {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var a []string
	for _, c := range codes {
		a = append(a, fmt.Sprintf("%d:%d", c, answers[c]))
	}
	fmt.Fprintf(&b, "chunk_answers=%s\nslow_reads_served=%d\nslow_reads_refused=%d\nslow_read_held_max_s=%.1f\n",
		strings.Join(a, ","), l.slowServed, l.slowNo, l.slowHeld.Seconds())
	return b.String()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
