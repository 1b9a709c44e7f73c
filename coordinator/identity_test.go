package coordinator

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// TestSlurmNodesReadsAddresses: Slurm's node list, as sinfo --json printed
// it on the dev cluster, gives each node's NodeAddr and NodeHostname.
func TestSlurmNodesReadsAddresses(t *testing.T) {
	data, err := filepath.Abs(filepath.Join("..", "slurm", "testdata", "22.05", "sinfo-json-features.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sinfo"), []byte("#!/bin/sh\nexec cat '"+data+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := SlurmNodes{Run: &slurm.Runner{Dir: dir}}.KnownNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []KnownNode
	features := map[string][]string{"n1": {"ib-a"}, "n2": {"a b", "ib-a", "llmgw.llama"}, "n3": {"ib-b"}, "n4": {"ib-b"}}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		want = append(want, KnownNode{Name: n, Addrs: []string{"127.0.0.1", "localhost"}, Features: features[n]})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("KnownNodes = %#v, want %#v", got, want)
	}
}

// TestSlurmNodesAddressesFromScontrol: the node list is read in sinfo's
// text form, which prints NodeAddr and NodeHostname on every release (the
// 24.11 and 26.05 listings of the dev cluster); where the text cannot be
// read safely (a feature with a '|') it is read as JSON, and from 23.02
// sinfo -N --json leaves the addresses out: scontrol show nodes --json
// says them, so a node is still known by the address its munged speaks
// from, not only by a name that may not resolve (n1..n4 do not).
func TestSlurmNodesAddressesFromScontrol(t *testing.T) {
	for _, rel := range []string{"24.11", "26.05"} {
		for _, form := range []string{"text", "json"} {
			t.Run(rel+"/"+form, func(t *testing.T) {
				fixture := func(name string) string {
					p, err := filepath.Abs(filepath.Join("..", "slurm", "testdata", rel, "fresh", name))
					if err != nil {
						t.Fatal(err)
					}
					return p
				}
				dir := t.TempDir()
				list := "exec cat '" + fixture("sinfo-nodes-list.txt") + "'"
				if form == "json" {
					list = "echo 'n1|ib-a|odd|idle|debug*|127.0.0.1|localhost'"
				}
				for cmd, cases := range map[string][][2]string{
					"sinfo": {{"-a -N -h -o %N|%b|%T|%P|%o|%n", list}, {"-N --json", "exec cat '" + fixture("sinfo-N-json.json") + "'"},
						{"-a -h -o %P", "echo 'debug*'"}},
					"scontrol": {{"show nodes --json", "exec cat '" + fixture("scontrol-show-nodes-json.json") + "'"}},
				} {
					script := "#!/bin/sh\ncase \"$*\" in\n"
					for _, c := range cases {
						script += "\"" + c[0] + "\") " + c[1] + " ;;\n"
					}
					script += "*) echo \"unexpected: $*\" >&2; exit 1 ;;\nesac\n"
					if err := os.WriteFile(filepath.Join(dir, cmd), []byte(script), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				got, err := SlurmNodes{Run: &slurm.Runner{Dir: dir}}.KnownNodes(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				var want []KnownNode
				for _, n := range []string{"n1", "n2", "n3", "n4"} {
					want = append(want, KnownNode{Name: n, Addrs: []string{"127.0.0.1", "localhost"}, Features: []string{e2eFabricOf(n)}})
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("KnownNodes = %+v, want %+v", got, want)
				}
			})
		}
	}
}

// e2eFabricOf is the dev cluster's fabric feature of node (scripts/dev-cluster:
// ib-a on n[1-2], ib-b on n[3-4]), as its fixtures list it.
func e2eFabricOf(node string) string {
	if node == "n1" || node == "n2" {
		return "ib-a"
	}
	return "ib-b"
}

// TestKnownNodesResolveOutsideTheLock: a node whose NodeHostname the DNS is
// slow to answer for holds up no other node's lookup, and a name resolved
// once is not looked up again at every read of the list, only after
// resolvedMaxAge; a name that failed is tried again at the next read.
//
// Seen failing as it should: with the lookup under mu, n2's lookup waited
// for n1's answer; with the addresses dropped at each read, every minute
// looked every name up again.
func TestKnownNodesResolveOutsideTheLock(t *testing.T) {
	src := &fixedNodes{nodes: []KnownNode{
		{Name: "n1", Addrs: []string{"10.0.0.1", "slow.example"}},
		{Name: "n2", Addrs: []string{"127.0.0.3", ""}},
		{Name: "n3", Addrs: []string{"gone.example"}},
	}}
	k := newKnownNodes(src)
	now := time.Unix(1_000_000, 0)
	k.now = func() time.Time { return now }
	var calls sync.Map // host -> *atomic.Int64
	count := func(host string) int64 {
		c, _ := calls.LoadOrStore(host, new(atomic.Int64))
		return c.(*atomic.Int64).Load()
	}
	started, release := make(chan struct{}, 1), make(chan struct{})
	k.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
		c, _ := calls.LoadOrStore(host, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		switch host {
		case "slow.example":
			select {
			case started <- struct{}{}:
			default:
			}
			<-release
			return []netip.Addr{netip.MustParseAddr("10.9.9.9")}, nil
		default:
			return nil, errors.New("no such host")
		}
	}
	ctx := context.Background()

	n1 := make(chan []netip.Addr)
	go func() {
		a, _ := k.lookup(ctx, "n1")
		n1 <- a
	}()
	<-started
	n2 := make(chan []netip.Addr)
	go func() {
		a, _ := k.lookup(ctx, "n2")
		n2 <- a
	}()
	select {
	case a := <-n2:
		if want := []netip.Addr{netip.MustParseAddr("127.0.0.3")}; !slices.Equal(a, want) {
			t.Errorf("n2's addresses: %v; want %v", a, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("n2's lookup waited for n1's hostname to resolve")
	}
	close(release)
	if a, want := <-n1, []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.9.9.9")}; !slices.Equal(a, want) {
		t.Errorf("n1's addresses: %v; want %v", a, want)
	}
	if _, ok := k.lookup(ctx, "n3"); !ok {
		t.Fatal("n3 is in the list")
	}

	// The next read of the list, a minute on: n1's answer stands, n3's
	// failed name is asked again.
	now = now.Add(knownNodesMaxAge + time.Second)
	k.lookup(ctx, "n1")
	k.lookup(ctx, "n3")
	if got := src.reads.Load(); got != 2 {
		t.Fatalf("the list was read %d times; want 2", got)
	}
	if a, b := count("slow.example"), count("gone.example"); a != 1 || b != 2 {
		t.Errorf("after a read of the list: slow.example looked up %d times, gone.example %d; want 1 and 2", a, b)
	}
	// Past resolvedMaxAge, n1's name is asked again.
	now = now.Add(resolvedMaxAge)
	k.lookup(ctx, "n1")
	if a := count("slow.example"); a != 2 {
		t.Errorf("past %v: slow.example looked up %d times; want 2", resolvedMaxAge, a)
	}
}
