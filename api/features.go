package api

import (
	"context"
	"net/http"
	"time"
)

// FeatureSync is one run of the coordinator's feature reconciler, as POST
// /v1/features answers it and status shows the last one.
type FeatureSync struct {
	// DryRun: the plan was computed and nothing was changed.
	DryRun bool `json:"dry_run"`
	// Time is when the run started (the coordinator's clock).
	Time time.Time `json:"time"`
	// Duration is how long it took, in seconds: reading Slurm, the calls,
	// and the read-back.
	Duration float64 `json:"duration_seconds"`
	// Nodes is how many nodes Slurm lists; Unchanged of them needed no
	// call, Drifted did.
	Nodes     int `json:"nodes"`
	Unchanged int `json:"unchanged"`
	Drifted   int `json:"drifted"`
	// Commands are the scontrol calls of the plan, as shell commands: one
	// per node config record whose AvailableFeatures changes (Records of
	// them, first), then one per distinct resulting ActiveFeatures set.
	// The last run kept for status holds the first of them only
	// (CommandsOmitted says how many more there were).
	Commands        []string `json:"commands"`
	CommandsOmitted int      `json:"commands_omitted,omitempty"`
	// Records is how many of the calls write AvailableFeatures (to whole
	// node config records).
	Records int `json:"records"`
	// Calls is how many of them were made (0 on a dry run).
	Calls int `json:"calls"`
	// Paused is how long, in seconds, the run waited between its calls,
	// pacing itself so that users' commands and the scheduler keep their
	// share of slurmctld.
	Paused float64 `json:"paused_seconds"`
	// Share is the least share of slurmctld's time the calls came down to
	// while users' reads, timed every so many calls, were slower than
	// before the run (1: never slowed them; 0 when no call was made).
	Share float64 `json:"share,omitempty"`
	// Unknown is a hostlist of reporting nodes that hold models but that
	// Slurm does not list; they get no feature.
	Unknown string `json:"unknown,omitempty"`
	// Withheld are the models whose features were left off every node
	// because with them llmgw's AvailableFeatures would add more to every
	// node listing than the coordinator's feature_listing_max_mb allows
	// (the least-held models go first); their jobs get no preference.
	// Empty at the default bound on any cluster of today: a quarter of
	// Slurm's message limit, over 350 models of 64-character names offered
	// on every one of 10,000 nodes.
	Withheld []string `json:"withheld,omitempty"`
	// ListingBytes is what llmgw's AvailableFeatures add to every node
	// listing (sinfo, scontrol show node) and to slurmctld's saved node
	// state, as planned: each config record offers the models its nodes
	// hold, or held within the last hour, once per node of it.
	ListingBytes int64 `json:"listing_bytes,omitempty"`
	// Error says why the run failed or was partial; empty when it worked.
	Error string `json:"error,omitempty"`
}

// FeatureStatus is the feature reconciler's state in GET /v1/status; absent
// when the reconciler is off.
type FeatureStatus struct {
	// Interval is how often it runs without a change, in seconds.
	Interval float64 `json:"interval_seconds"`
	// File is where it publishes the features for job_submit.lua.
	File string `json:"file"`
	// LastOK is when a run last worked; zero before the first.
	LastOK time.Time `json:"last_ok,omitzero"`
	// Last is the most recent run, failed or not; nil before the first.
	Last *FeatureSync `json:"last,omitempty"`
	// Retry is when a failing reconciler tries again; zero when it is not
	// failing.
	Retry time.Time `json:"retry,omitzero"`
}

// SyncTimeout bounds one feature sync asked for through POST /v1/features:
// a reconcile of 10,000 nodes takes 20-50 s at full speed on 2 cores, and
// several times that when the reconciler's pacing leaves users most of
// slurmctld.
const SyncTimeout = 5 * time.Minute

// SyncFeatures asks the coordinator to reconcile Slurm node features now
// (admin token). With dryRun it only computes the plan.
func (c *Client) SyncFeatures(ctx context.Context, dryRun bool) (*FeatureSync, error) {
	path := "/v1/features"
	if dryRun {
		path += "?dry_run=1"
	}
	// The coordinator bounds a sync at SyncTimeout (a reconcile of 10,000
	// nodes after a wipe takes tens of seconds, paced): wait for its
	// answer that long, not the 30 s of an ordinary request.
	ctx = context.WithValue(ctx, longCall{}, SyncTimeout+30*time.Second)
	var out FeatureSync
	if err := c.Do(ctx, http.MethodPost, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
