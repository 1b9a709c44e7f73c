--[[
llmgw's burst_buffer.lua: hold a job that asked to wait for its weights
(sbatch --llmgw-warm, or llmgw:warm in its comment) until the nodes backfill
plans for it hold its model, or the coordinator's bound (prefetch_warm_max)
passes; never longer, and never a job that did not ask. llmgw's job_submit
module gives such a job the directive "#BB_LUA llmgw-warm"; every other job
never reaches this script.

Install it as burst_buffer.lua beside slurm.conf, with
BurstBufferType=burst_buffer/lua, and keep burst_buffer.conf's
StageInTimeout above the coordinator's prefetch_warm_max: past
StageInTimeout Slurm holds the job for good. A site has one
BurstBufferType, so a site running another burst buffer cannot use this.

The answer comes from `llmgw warm JOB` (docs/design.md, "Prefetch"), which
prints "ready: ..." or "wait: ...", and "ready" when the coordinator cannot
be asked. llmgw-warm.conf beside this script may set "coordinator = URL"
(else llmgw finds it as every client does, LLMGW_COORDINATOR in slurmctld's
environment), "llmgw = /path/to/llmgw" (default /usr/bin/llmgw), how llmgw
proves who asks where the coordinator wants it ("munge_socket = PATH", by
default munged's own socket; or "token_file = PATH", a read token) and
"poll = SECONDS" (22.05's wait between questions, default 5). docs/slurm/behaviour.md §12
says what each release calls:
  - 23.02 and later: slurm_bb_data_in returns at once, and Slurm polls
    slurm_bb_test_data_in every PollInterval while the job pends; it
    answers BUSY to hold the job. job_info gives the planned nodes.
  - 22.05: there is no slurm_bb_test_data_in and no job_info, so
    slurm_bb_data_in itself waits, asking every POLL seconds; the
    coordinator knows the plan from its own reads.
]]

-- Settings, which llmgw-warm.conf beside this script may replace with
-- "key = value" lines (coordinator, llmgw, poll). Read at every question,
-- not once: Slurm keeps the script loaded until the script itself changes,
-- and an edit of the settings must not wait for that.
local defaults = { llmgw = "/usr/bin/llmgw", coordinator = nil, poll = 5 }

local function script_dir()
	local src = debug.getinfo(1, "S").source
	return src:sub(1, 1) == "@" and src:match("^@(.*/)[^/]*$") or nil
end

local function settings()
	local conf = { llmgw = defaults.llmgw, coordinator = defaults.coordinator, poll = defaults.poll }
	local dir = script_dir()
	local f = dir and io.open(dir .. "llmgw-warm.conf", "r")
	if f then
		for line in f:lines() do
			local k, v = line:match("^%s*([%w_]+)%s*=%s*(%S+)%s*$")
			if k == "coordinator" and v:match("^https?://[%w%.%-:%[%]]+/?$") then
				conf.coordinator = v
			elseif k == "llmgw" and v:match("^/[%w%./_%-]+$") then
				conf.llmgw = v
			elseif (k == "munge_socket" or k == "token_file") and v:match("^/[%w%./_%-]+$") then
				conf[k] = v
			elseif k == "poll" and tonumber(v) then
				conf.poll = math.max(1, math.floor(tonumber(v)))
			end
		end
		f:close()
	end
	return conf
end

local function quote(s)
	return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- warm asks llmgw whether job may start; true when it may.
local function warm(job_id, nodes)
	if not tostring(job_id):match("^%d+$") then
		return true, "not a job id"
	end
	local conf = settings()
	local cmd = quote(conf.llmgw) .. " warm " .. job_id
	if conf.munge_socket then
		cmd = "LLMGW_MUNGE_SOCKET=" .. quote(conf.munge_socket) .. " " .. cmd
	end
	if conf.token_file then
		cmd = cmd .. " --token-file " .. quote(conf.token_file)
	end
	local url = conf.coordinator
	if url then
		cmd = cmd .. " --coordinator " .. quote(url)
	end
	if nodes and nodes ~= "" and nodes:match("^[%w%[%]%-,._]+$") then
		cmd = cmd .. " --nodes " .. quote(nodes)
	end
	local h = io.popen(cmd .. " 2>&1")
	if not h then
		return true, "cannot run " .. conf.llmgw
	end
	local out = h:read("*a") or ""
	h:close()
	return out:sub(1, 5) ~= "wait:", out
end

function slurm_bb_job_process(job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_pools()
	return slurm.SUCCESS
end

function slurm_bb_job_teardown(job_id, job_script, hurry, uid, gid)
	return slurm.SUCCESS
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script, job_info)
	return slurm.SUCCESS
end

function slurm_bb_data_in(job_id, job_script, uid, gid, job_info)
	if job_info ~= nil then
		-- 23.02 and later: slurm_bb_test_data_in does the waiting.
		return slurm.SUCCESS
	end
	-- 22.05: wait here. The coordinator's bound ends it; the count is a
	-- second bound in case the coordinator's clock or state is lost.
	for _ = 1, 720 do
		local ok, why = warm(job_id, nil)
		if ok then
			slurm.log_info("llmgw: job %s may start: %s", job_id, why)
			return slurm.SUCCESS
		end
		os.execute("sleep " .. settings().poll)
	end
	return slurm.SUCCESS
end

function slurm_bb_test_data_in(job_id, job_script, uid, gid, job_info)
	local nodes = job_info and job_info["sched_nodes"] or nil
	local ok, why = warm(job_id, nodes)
	if ok then
		slurm.log_info("llmgw: job %s may start: %s", job_id, why)
		return slurm.SUCCESS
	end
	return slurm.SUCCESS, slurm.SLURM_BB_BUSY or "BUSY"
end

function slurm_bb_real_size(job_id, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_paths(job_id, job_script, path_file, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_post_run(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_data_out(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_test_data_out(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_get_status(...)
	return slurm.SUCCESS, "llmgw: holds jobs that asked to wait for their weights (llmgw warm)"
end
