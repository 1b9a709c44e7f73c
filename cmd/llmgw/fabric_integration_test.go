//go:build integration

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/swarmtest"
)

// TestFabricFromSlurmOnCluster is issue 24's fabric on the real cluster:
// with fabric_features, the coordinator reads each node's fabric from this
// release's Slurm (the dev cluster's Feature=ib-a on n[1-2], ib-b on
// n[3-4]), with the node list it reads for MUNGE, and refuses a report
// whose fabric is another, signed with the node's own munged, saying what
// Slurm says and what to fix; a node's swarm is of Slurm's fabric, and its
// plan lists each member with the address Slurm gives it (its munged's
// origin), which chunk servers check credentials against.
//
// Seen failing as it should on main: coordinator.toml's fabric_features is
// an unknown key there, and n1's report naming ib-b was taken, making n1 a
// member of ib-b's swarms.
func TestFabricFromSlurmOnCluster(t *testing.T) {
	bin, _ := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	scontrol, sinfo := slurmTools(t)
	base := t.TempDir()
	coordConf := filepath.Join(base, "coordinator.toml")
	toml := fmt.Sprintf("munge_socket = %q\nfabric_features = [\"ib-a\", \"ib-b\"]\nswarm_min_chunk = %d\n", devMungeSocket(t, conf, ""), 1<<20)
	if err := os.WriteFile(coordConf, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, bin, base, "--config", coordConf, "--slurm-conf", conf, "--scontrol", scontrol, "--sinfo", sinfo)

	node := func(n, fabric string) *swarmtest.Node {
		return swarmtest.New(c.url, n, fabric, munge.New(devMungeSocket(t, conf, n)))
	}
	// Each node with its own fabric, as Slurm has it: taken.
	for _, n := range devNodes {
		if _, err := node(n, e2eFabric[n]).Report(ctx); err != nil {
			t.Errorf("%s reporting %s, its fabric in Slurm: %v", n, e2eFabric[n], err)
		}
	}
	// n1 (ib-a in Slurm) saying it is of ib-b, with its own credential.
	_, err := node("n1", "ib-b").Report(ctx)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest ||
		!strings.Contains(ae.Message, `fabric "ib-b", but Slurm lists n1 with feature ib-a`) || !strings.Contains(ae.Message, `set fabric = "ib-a" in n1's agent.toml`) {
		t.Fatalf("n1's report naming ib-b: %v; want 400 saying Slurm's word and what to fix", err)
	}
	// n4 saying it is of no fabric.
	if _, err := node("n4", "").Report(ctx); err == nil || !strings.Contains(err.Error(), "Slurm lists n4 with feature ib-b") {
		t.Errorf("n4's report naming no fabric: %v; want refused", err)
	}

	// A swarm of n3's is ib-b's, with its members at Slurm's addresses.
	data := []byte(strings.Repeat("llmgw fabric test ", 1<<16))
	sum := sha256.Sum256(data)
	src := "http://127.0.0.1:1/m/fabric.gguf"
	admin := &api.Client{BaseURL: c.url, Token: "admin-secret"}
	if _, err := admin.PutModel(ctx, api.Model{Name: "fabric-test", Source: src, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	rep := api.SwarmReport{Source: src, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), ChunkSize: 1 << 20}
	if _, err := node("n3", "ib-b").Swarm(ctx, rep); err != nil {
		t.Fatal(err)
	}
	p, err := node("n4", "ib-b").Swarm(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range p.Members {
		got[m.Node] = strings.Join(m.Addrs, ",")
	}
	if !p.AddrsBound || len(got) != 2 || !strings.Contains(got["n3"], "127.0.0.13") || !strings.Contains(got["n4"], "127.0.0.14") {
		t.Errorf("n4's plan: members %v (bound %v); want n3 and n4 at their NodeAddr", got, p.AddrsBound)
	}
	st, err := admin.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.FabricsFrom != api.FabricsFromSlurm || len(st.Swarms) != 1 || st.Swarms[0].Fabric != "ib-b" || st.Swarms[0].Members != 2 {
		t.Errorf("status: fabrics from %q, swarms %+v; want slurm, and one swarm of ib-b with n3 and n4", st.FabricsFrom, st.Swarms)
	}
}
