package coordinator

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// KnownNode is a node the cluster knows, with the names or addresses its
// daemons speak from (Slurm's NodeAddr and NodeHostname).
type KnownNode struct {
	Name  string
	Addrs []string
}

// NodeSource lists the nodes reports may come from. Production reads
// Slurm's (SlurmNodes); a fixed list serves tests of the logic around it.
type NodeSource interface {
	KnownNodes(ctx context.Context) ([]KnownNode, error)
}

// SlurmNodes is Slurm's node list, read with sinfo.
type SlurmNodes struct{ Run *slurm.Runner }

func (s SlurmNodes) KnownNodes(ctx context.Context) ([]KnownNode, error) {
	nodes, err := s.Run.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]KnownNode, len(nodes))
	for i, n := range nodes {
		out[i] = KnownNode{Name: n.Name, Addrs: []string{n.Addr, n.Hostname}}
	}
	return out, nil
}

// How often the node list is read again: every knownNodesMaxAge while
// reports come, and on a report from a name not in it at most every
// knownNodesMinAge, so that a stream of made-up names costs one sinfo per
// knownNodesMinAge, not one each.
const (
	knownNodesMaxAge = time.Minute
	knownNodesMinAge = 10 * time.Second
)

// knownNodes caches a NodeSource, and each node's addresses resolved on
// first use.
type knownNodes struct {
	src NodeSource
	// refresh serialises reads of src; mu guards the fields below and is
	// never held across one.
	refresh sync.Mutex
	mu      sync.Mutex
	list    map[string][]string
	addrs   map[string][]netip.Addr
	read    time.Time
	err     error
	now     func() time.Time
}

func newKnownNodes(src NodeSource) *knownNodes {
	return &knownNodes{src: src, now: time.Now}
}

// lookup returns node's addresses and whether the cluster knows it.
func (k *knownNodes) lookup(ctx context.Context, node string) ([]netip.Addr, bool) {
	k.mu.Lock()
	age := k.now().Sub(k.read)
	_, ok := k.list[node]
	never := k.list == nil
	k.mu.Unlock()
	if never || age > knownNodesMaxAge || !ok && age > knownNodesMinAge {
		k.reload(ctx)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	names, ok := k.list[node]
	if !ok {
		return nil, false
	}
	if a, done := k.addrs[node]; done {
		return a, true
	}
	var out []netip.Addr
	for _, n := range names {
		if n == "" {
			continue
		}
		if a, err := netip.ParseAddr(n); err == nil {
			out = append(out, a.Unmap())
			continue
		}
		// Resolved under mu: once per node per list, and a node's
		// hostname is in /etc/hosts or the site's DNS, which answer fast.
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", n)
		if err != nil {
			continue
		}
		for _, a := range ips {
			out = append(out, a.Unmap())
		}
	}
	k.addrs[node] = out
	return out, true
}

// reload reads the list again unless another caller just did.
func (k *knownNodes) reload(ctx context.Context) {
	k.refresh.Lock()
	defer k.refresh.Unlock()
	k.mu.Lock()
	fresh := k.list != nil && k.now().Sub(k.read) < knownNodesMinAge
	k.mu.Unlock()
	if fresh {
		return
	}
	nodes, err := k.src.KnownNodes(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.read, k.err = k.now(), err
	if err != nil {
		// Keep the last list: Slurm's controller restarting must not turn
		// every node away. Before any list, every node is unknown.
		if k.list == nil {
			k.list = map[string][]string{}
		}
		return
	}
	k.list = make(map[string][]string, len(nodes))
	for _, n := range nodes {
		k.list[n.Name] = n.Addrs
	}
	k.addrs = make(map[string][]netip.Addr, len(nodes))
}

// names returns the current list's names, and false when it was never read.
func (k *knownNodes) names() (map[string]bool, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.list == nil || k.err != nil {
		return nil, false
	}
	out := make(map[string]bool, len(k.list))
	for n := range k.list {
		out[n] = true
	}
	return out, true
}
