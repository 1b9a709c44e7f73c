package coordinator

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// KnownNode is a node the cluster knows, with the names or addresses its
// daemons speak from (Slurm's NodeAddr and NodeHostname), and its features,
// among which fabric_features names its fabric (fabric.go).
type KnownNode struct {
	Name     string
	Addrs    []string
	Features []string
}

// NodeSource lists the nodes reports may come from. Production reads
// Slurm's (SlurmNodes); a fixed list serves tests of the logic around it.
type NodeSource interface {
	KnownNodes(ctx context.Context) ([]KnownNode, error)
}

// SlurmNodes is Slurm's node list, read with sinfo: each node's names and
// active features, not its available ones (slurm.ReadNodes), which a
// catalog offered on every node made most of a listing. A site's fabric
// feature comes from slurm.conf's Feature=, which makes it active as well
// as available.
type SlurmNodes struct{ Run *slurm.Runner }

func (s SlurmNodes) KnownNodes(ctx context.Context) ([]KnownNode, error) {
	list, err := s.Run.ReadNodes(ctx, false)
	if err != nil {
		return nil, err
	}
	nodes := list.Nodes
	fillAddrs(ctx, s.Run, nodes)
	out := make([]KnownNode, len(nodes))
	for i, n := range nodes {
		out[i] = KnownNode{Name: n.Name, Addrs: []string{n.Addr, n.Hostname}, Features: nodeFeatures(n)}
		if n.Addr == "" && n.Hostname == "" {
			// Slurm's own default: NodeHostname is NodeName, NodeAddr is
			// NodeHostname. sinfo after 22.05 does not print them.
			out[i].Addrs = []string{n.Name}
		}
	}
	return out, nil
}

// nodeFeatures is every feature n has, available or active, each once: a
// site's fabric feature is both (slurm.conf Feature=), and a node_features
// plugin may list it as either.
func nodeFeatures(n slurm.Node) []string {
	out := slices.Concat(n.Available, n.Active)
	slices.Sort(out)
	return slices.Compact(out)
}

// fillAddrs gives the nodes sinfo listed without NodeAddr and NodeHostname
// those of `scontrol show nodes --json`. sinfo's text form prints them
// (ReadNodes), but from 23.02 its JSON records, which ReadNodes falls
// back to when the text cannot be read, leave them empty, and the node's
// name alone is then all there is to check a credential's host against: a node whose name does not resolve to the
// address its munged speaks from (NodeName=n3 NodeAddr=10.1.0.3, or the
// dev cluster's n1..n4 on 127.0.0.1) had every report refused. When
// scontrol cannot say, the names stand, as before.
func fillAddrs(ctx context.Context, run *slurm.Runner, nodes []slurm.Node) {
	if !slices.ContainsFunc(nodes, func(n slurm.Node) bool { return n.Addr == "" && n.Hostname == "" }) {
		return
	}
	out, err := run.Run(ctx, "scontrol", "show", "nodes", "--json")
	if err != nil {
		return
	}
	listed, err := slurm.ParseNodesJSON(out)
	if err != nil {
		return
	}
	byName := make(map[string]slurm.Node, len(listed))
	for _, n := range listed {
		byName[n.Name] = n
	}
	for i, n := range nodes {
		if m, ok := byName[n.Name]; ok && n.Addr == "" && n.Hostname == "" {
			nodes[i].Addr, nodes[i].Hostname = m.Addr, m.Hostname
		}
	}
}

// How often the node list is read again: every knownNodesMaxAge while
// reports come, and on a report from a name not in it at most every
// knownNodesMinAge, so that a stream of made-up names costs one sinfo per
// knownNodesMinAge, not one each.
const (
	knownNodesMaxAge = time.Minute
	knownNodesMinAge = 10 * time.Second
)

// A node's hostnames are looked up again after resolvedMaxAge, not on every
// read of the list: at 10,000 nodes a list read each minute that dropped
// every answer was 10,000 lookups a minute. A lookup that failed is tried
// again at the next read. One lookup waits at most resolveTimeout: a node
// whose NodeHostname the site's DNS does not answer for is refused after
// that (its NodeAddr still counts), and holds up no other node's report.
const (
	resolvedMaxAge = 10 * time.Minute
	resolveTimeout = 2 * time.Second
)

// knownNodes caches a NodeSource, and each node's addresses resolved on
// first use.
type knownNodes struct {
	src NodeSource
	// refresh serialises reads of src; mu guards the fields below and is
	// never held across one, nor across a name lookup.
	refresh sync.Mutex
	mu      sync.Mutex
	list    map[string]KnownNode
	addrs   map[string]resolved
	read    time.Time
	err     error
	now     func() time.Time
	// resolve looks a hostname up (net.DefaultResolver; a test counts).
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// onRead, when set, is given every list read successfully (the
	// coordinator forgets nodes that left it); it runs in a goroutine of
	// its own, so the report that caused the read does not wait.
	onRead func(names map[string]bool)
}

// resolved is a node's addresses as looked up from its names at a time.
type resolved struct {
	names []string
	addrs []netip.Addr
	at    time.Time
	// failed: a name did not resolve, so the next read of the list tries
	// it again.
	failed bool
}

func newKnownNodes(src NodeSource) *knownNodes {
	return &knownNodes{src: src, now: time.Now, resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}
}

// node returns node as the list has it, reading the list again when it is
// old, or when node is not in it and it is not fresh; ok says the list has
// it. err is why the list could not be read, when none ever was.
func (k *knownNodes) node(ctx context.Context, node string) (n KnownNode, ok bool, err error) {
	k.mu.Lock()
	age := k.now().Sub(k.read)
	_, ok = k.list[node]
	never := k.list == nil
	k.mu.Unlock()
	if never || age > knownNodesMaxAge || !ok && age > knownNodesMinAge {
		k.reload(ctx)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	n, ok = k.list[node]
	if len(k.list) == 0 && k.err != nil {
		err = k.err
	}
	return n, ok, err
}

// lookup returns node's addresses and whether the cluster knows it.
func (k *knownNodes) lookup(ctx context.Context, node string) ([]netip.Addr, bool) {
	kn, ok, _ := k.node(ctx, node)
	if !ok {
		return nil, false
	}
	names := kn.Addrs
	k.mu.Lock()
	r, done := k.addrs[node]
	k.mu.Unlock()
	if done {
		return r.addrs, true
	}
	// Outside mu: a slow answer for this node must not hold up the
	// reports of every other. Two reports of one node may both look up;
	// the answers are the same.
	r = resolved{names: names, at: k.now()}
	for _, n := range names {
		if n == "" {
			continue
		}
		if a, err := netip.ParseAddr(n); err == nil {
			r.addrs = append(r.addrs, a.Unmap())
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		ips, err := k.resolve(lctx, n)
		cancel()
		if err != nil {
			r.failed = true
			continue
		}
		for _, a := range ips {
			r.addrs = append(r.addrs, a.Unmap())
		}
	}
	k.mu.Lock()
	if cur, still := k.list[node]; still && slices.Equal(cur.Addrs, names) {
		k.addrs[node] = r
	}
	k.mu.Unlock()
	return r.addrs, true
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
			k.list = map[string]KnownNode{}
		}
		return
	}
	k.list = make(map[string]KnownNode, len(nodes))
	names := make(map[string]bool, len(nodes))
	old := k.addrs
	k.addrs = make(map[string]resolved, len(nodes))
	for _, n := range nodes {
		k.list[n.Name] = n
		names[n.Name] = true
		// Kept while the node's names are the same, every one of them
		// resolved, and not for longer than resolvedMaxAge.
		if r, ok := old[n.Name]; ok && !r.failed && slices.Equal(r.names, n.Addrs) && k.read.Sub(r.at) < resolvedMaxAge {
			k.addrs[n.Name] = r
		}
	}
	if k.onRead != nil {
		go k.onRead(names)
	}
}

// forgetLeft forgets the nodes that are not in Slurm's list (names) and
// have not reported for ForgetAfter: a node removed from the cluster would
// otherwise stay in status, and a made-up one that got in before the list
// was checked would stay for ever. One run at a time; a run that finds
// another going leaves the work to it.
func (s *Server) forgetLeft(names map[string]bool) {
	if !s.forgetting.CompareAndSwap(false, true) {
		return
	}
	defer s.forgetting.Store(false)
	now := s.now()
	var gone []string
	s.view.mu.RLock()
	for name, n := range s.view.nodes {
		if !names[name] && now.Sub(n.Received) > s.cfg.ForgetAfter {
			gone = append(gone, name)
		}
	}
	s.view.mu.RUnlock()
	if len(gone) == 0 {
		return
	}
	forgot, err := s.forget(context.Background(), gone)
	if err != nil {
		s.log.WithError(err).Error("forgetting nodes that left Slurm's node list failed")
		return
	}
	s.log.WithField("nodes", forgot).WithField("silent_for", s.cfg.ForgetAfter.String()).Info("forgot nodes that left Slurm's node list")
}

// forget removes nodes from the store and the view, under writeMu like
// every write, and returns those that were there.
func (s *Server) forget(ctx context.Context, names []string) ([]string, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	gone, err := s.db.DeleteNodes(ctx, names)
	if err != nil || len(gone) == 0 {
		return gone, err
	}
	s.view.mu.Lock()
	for _, n := range gone {
		delete(s.view.keys, n)
	}
	s.view.mu.Unlock()
	if err := s.view.load(ctx, s.db); err != nil {
		return gone, err
	}
	s.features.poke()
	return gone, nil
}
