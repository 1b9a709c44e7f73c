-- The room of a node's Hugging Face cache (agent.toml's hf_cache) when it
-- is on another filesystem than the node's fetch cache, as its agent
-- reports it (api.Report.HFCache): placement checks a Hub model's fetch
-- against it. 0 total is none reported: the fetch cache's room is then
-- the Hugging Face cache's too.
ALTER TABLE nodes ADD COLUMN hf_cache_free_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN hf_cache_total_bytes INTEGER NOT NULL DEFAULT 0;
