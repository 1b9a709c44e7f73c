package agent

import (
	"net/netip"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// TestHeldMembersKeptAcrossPlansWithoutThem (issue 24, 3e): a plan that
// leaves the members out, because the member's report gave back the
// version it holds, leaves the chunk server's members as they were, and the
// next report gives the version back again; a plan with a new list
// replaces them.
func TestHeldMembersKeptAcrossPlansWithoutThem(t *testing.T) {
	h := &held{}
	first := memberPlan("n2", "127.0.0.2", "n3", "127.0.0.3")
	first.MembersVersion = 7
	h.setMembers(first)
	n3 := netip.MustParseAddr("127.0.0.3")
	if !h.admits("n3", n3) {
		t.Fatal("n3 is not admitted after the plan that lists it")
	}
	h.setMembers(api.SwarmPlan{Instance: "test", AddrsBound: true, MembersVersion: 7})
	if !h.admits("n3", n3) || h.membersVersion != 7 {
		t.Errorf("after a plan without members (version 7): n3 admitted %v, version %d; want the list kept", h.admits("n3", n3), h.membersVersion)
	}
	s := &swarm{h: h}
	if r := s.report(false, false); r.MembersVersion != 7 {
		t.Errorf("the report gives back members version %d, want 7", r.MembersVersion)
	}
	next := memberPlan("n2", "127.0.0.2")
	next.MembersVersion = 8
	h.setMembers(next)
	if h.admits("n3", n3) || h.membersVersion != 8 {
		t.Errorf("after a plan without n3 (version 8): n3 admitted %v, version %d", h.admits("n3", n3), h.membersVersion)
	}
}
