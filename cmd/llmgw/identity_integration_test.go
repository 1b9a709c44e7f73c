//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// devMungeSocket is the socket of a dev cluster node's own munged
// (scripts/dev-cluster: munge/NODE/munge.socket.2, its origin the node's
// NodeAddr 127.0.0.1K), or with node "" the controller's, which slurmctld
// and every slurmd use and whose origin, 127.0.0.1, is no node's.
func devMungeSocket(t *testing.T, conf, node string) string {
	t.Helper()
	sock := filepath.Join(filepath.Dir(conf), "munge", node, "munge.socket.2")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the dev cluster's munge socket for %q: %v; scripts/dev-cluster up starts one munged per node", node, err)
	}
	return sock
}

// TestMungeIdentityOnCluster is issue 16's identity on the real cluster:
// the coordinator reads the nodes and their NodeAddr from this release's
// Slurm (sinfo, or scontrol --json from 23.02), and each node's munged
// makes credentials from that node's address. A report is taken only from
// the node it names; another node's credential, the controller's, a
// replayed one and a non-root one are refused with the one refusal, and
// none of them leaves a trace in status.
//
// Seen failing as it should: with n2's NodeAddr set to n1's address
// (scontrol update), as when every node was at 127.0.0.1 before the dev
// cluster ran a munged per node, n1's credential spoke for n2 and n2's own
// was refused.
func TestMungeIdentityOnCluster(t *testing.T) {
	bin, _ := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	scontrol, sinfo := slurmTools(t)
	base := t.TempDir()
	coordConf := filepath.Join(base, "coordinator.toml")
	if err := os.WriteFile(coordConf, []byte(fmt.Sprintf("munge_socket = %q\n", devMungeSocket(t, conf, ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, bin, base, "--config", coordConf, "--slurm-conf", conf, "--scontrol", scontrol, "--sinfo", sinfo)

	codec := func(node string) munge.Codec { return munge.New(devMungeSocket(t, conf, node)) }
	report := func(node string) *api.Report {
		now := time.Now()
		return &api.Report{ID: uuid.NewString(), Seq: 1, Started: now, Time: now, Node: node, Fabric: e2eFabric[node],
			Looked: true, Weights: []api.Weight{}, AgentVersion: "identity-test"}
	}
	post := func(signer, node string) error {
		cl := &api.Client{BaseURL: c.url, Auth: munge.Authenticator{Codec: codec(signer)}}
		_, err := cl.PostReport(ctx, report(node))
		return err
	}
	denied := func(what string, err error) {
		t.Helper()
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Errorf("%s: %v; want 401, the one refusal", what, err)
		}
	}

	for _, n := range devNodes {
		if err := post(n, n); err != nil {
			t.Errorf("%s's report with %s's own credential: %v; want it taken", n, n, err)
		}
	}
	denied("n1's credential in a report for n2", post("n1", "n2"))
	denied("n4's credential in a report for n1, of the other fabric", post("n4", "n1"))
	denied("the controller's credential (origin 127.0.0.1) in a report for n1", post("", "n1"))

	// send posts body as a report with the Authorization header auth, and
	// returns the status: the credentials below are made by hand, for a
	// replay and for another uid.
	send := func(auth string, body []byte) int {
		req, err := http.NewRequest(http.MethodPost, c.url+"/"+api.Version+"/reports", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	credAs := func(node string, uid uint32, body []byte) string {
		return api.MungeScheme + " " + mungetest.EncodeAs(t, codec(node), uid, uid, api.MungePayload(http.MethodPost, "/"+api.Version+"/reports", body))
	}

	// A credential is good once: munged's replay check, through the
	// coordinator's decode. The second send of the same request is refused.
	body, err := json.Marshal(report("n3"))
	if err != nil {
		t.Fatal(err)
	}
	cred := credAs("n3", 0, body)
	if first, again := send(cred, body), send(cred, body); first != http.StatusAccepted || again != http.StatusUnauthorized {
		t.Errorf("n3's credential sent twice: %d then %d; want 202 (taken) then 401 (replayed)", first, again)
	}

	// A report needs root on the node (or the configured agent user): a
	// user's credential from n4's own munged speaks for nobody.
	body, err = json.Marshal(report("n4"))
	if err != nil {
		t.Fatal(err)
	}
	if got := send(credAs("n4", 8, body), body); got != http.StatusUnauthorized {
		t.Errorf("a non-root credential from n4 in n4's report: %d; want 401", got)
	}

	// What status counts came from the nodes' own reports, and nothing
	// else: four nodes, two in each fabric.
	st, err := (&api.Client{BaseURL: c.url, Auth: munge.Authenticator{Codec: codec("n1")}}).Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	got := map[string]int{"total": st.Nodes.Total}
	for _, f := range st.Fabrics {
		got[f.Fabric] = f.Counts.Total
	}
	if want := map[string]int{"total": 4, "ib-a": 2, "ib-b": 2}; !maps.Equal(got, want) {
		t.Errorf("status counts nodes %v; want %v, each from its own report", got, want)
	}
}
