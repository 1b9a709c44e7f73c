--[[
llmgw_submit.lua: llmgw's job_submit module, a soft preference for the nodes
that hold a job's model.

For users who submit with plain sbatch:
    sbatch --llmgw-model=M ...          (the llmgw SPANK plugin is loaded)
    sbatch --comment='llmgw:model=M' ...
it does what `llmgw sbatch --model M` does (slurm/prefer.go, Compose): it adds
--prefer=llmgw.M (the user's --constraint and --prefer folded in, llmgw.M*k
when the job wants more nodes than hold it, [(<constraint>&llmgw.M)*k&...]
beside a constraint) only when the nodes can satisfy
it, because Slurm 22.05 rejects a job whose preference no node set can meet,
and lets a satisfiable preference replace --constraint (docs/slurm/behaviour.md §1, §6).

It never rejects a job on llmgw's account: every error ends in slurm.SUCCESS
and a log line. What it did is noted in the job's AdminComment.

Which nodes hold what comes from the feature file the llmgw coordinator
publishes (one line per node: name, partitions, active features, the
admin's and llmgw's), not from slurmctld: job_submit runs inside slurmctld,
which must not be asked. With every feature in the file, a --constraint
such as ib-b is checked as llmgw sbatch checks it: (ib-b)&llmgw.M is added
only when a node in the partition has both.

The file must say what Slurm has now. `scontrol reconfigure` or a slurmctld
restart wipes scontrol-set features (docs/slurm/behaviour.md §2); until the coordinator's next
sync puts them back (one interval), a file still listing them would yield a
preference Slurm refuses, and this script cannot retry. So the file's header
carries the time its sync began (synced=, the coordinator's clock; keep the
two hosts' clocks in step with NTP) and the interval, and no preference is
added while the file is older than the last time this script saw slurmctld
rebuild its tables, or older than two intervals (the coordinator is down or
stuck); AdminComment says why. llmgw sbatch has no such window: it
retries without the preference when Slurm refuses it; its jobs carry
llmgw:composed in the comment and are left alone here.

How the script sees a reconfigure (Slurm 22.05.8 on the dev cluster, and
its source; the reproduction is below):
  - `scontrol reconfigure` does NOT re-load this script: a global set at load
    (os.time()) kept its value across three reconfigures and a SIGHUP.
    Source: slurmctld calls job_submit_plugin_reconfig(), which restarts the
    plugins only when the JobSubmitPlugins list changed
    (src/slurmctld/job_submit.c), and job_submit_lua.c re-loads the script
    only when its mtime is newer than at the last load
    (slurm_lua_loadscript: st.st_mtime <= *load_time skips).
  - touching the script re-loaded it at the next submission (the global
    changed), and a slurmctld restart loads it afresh at start.
  - but every reconfigure (and SIGHUP) rebuilds slurmctld's partition
    records: the pointer job_submit_lua.c hides in each part_list entry's
    metatable (_part_rec_ptr) changed after each of them, and stayed the same
    between plain submissions.
Reproduced with a job_submit.lua that writes its load time and tostring()
of each _part_rec_ptr into AdminComment, on scripts/dev-cluster: submit,
`scontrol reconfigure`, submit, `kill -HUP`, submit, touch the script,
submit, restart slurmctld, submit.
So every submission, llmgw's or not, notes the partition pointers; a
pointer unlike the one last seen for that partition, or the first
submission after a load (a reconfigure may have come between the load and
it), marks "slurmctld rebuilt its tables now", and preferences wait for a
sync that began later. A SIGHUP keeps the features but is counted too: a
wasted interval, never a rejection. Left open: two reconfigures with no
submission between them could hand a partition its old address back, and
one would go unseen.

How a site uses it: its own job_submit.lua loads this module (it defines
no globals and returns one table) and calls it from its own functions:

    local llmgw = dofile("/usr/share/llmgw/llmgw_submit.lua")
    function slurm_job_submit(job_desc, part_list, submit_uid)
        -- the site's own checks, which may reject the job
        return llmgw.submit(job_desc, part_list, submit_uid)
    end
    function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
        return llmgw.modify(job_desc, job_rec, part_list, modify_uid)
    end

A site without a script of its own uses job_submit.lua beside this file,
which is exactly that. slurmctld reloads the script only when the script's
own mtime changes, never for this module: after upgrading llmgw, `touch`
the site's job_submit.lua. On a cluster with a backup controller the
feature file must be readable there too (a shared path, or the coordinator
writing to both), or jobs get no preference while the backup is in charge.

Cost: slurmctld runs this for every submission, under its locks, so a job
that names a model must cost little more than one that does not (at most
twice: docs/design.md §6). A job without a model costs a table walk. A job
with one costs a few table lookups and the note it writes: the feature file
is looked at (opened, its header line read) at most once per second of
os.time(), so a rewrite is seen up to a second late (llmgw.features says
why that is harmless); when its nodes changed (the header's lines= digest),
only the classes at its top are read, a few hundred lines whatever the
nodes, and a node's own line only when a job excludes it
(llmgw_features.lua); and what a request was given (preference, exclusion,
note) is kept for the next job that asks the same, until the nodes change.
A request not asked before costs a count over groups of nodes that look
alike to it, kept per partition, model and constraint.
scripts/bench/job-submit.sh measures each.

The module is three files, installed side by side: this one (the entry: the
job, the freshness gate, the notes), llmgw_compose.lua (the composition,
slurm/prefer.go's twin) and llmgw_features.lua (the feature file), which
this one loads from beside itself, whatever path it was loaded by.

Keep PREFIX and the composition in step with slurm/prefer.go:
slurm/lua_test.go runs both on the same table.
]]

-- The prefix of every node feature llmgw owns (slurm.FeaturePrefix).
local PREFIX = "llmgw."
-- Slurm rejects a --prefer or --comment longer than this (docs/slurm/behaviour.md §2).
local MAX_EXPRESSION = 1024
local COMMENT_TAG = "llmgw:model="
-- llmgw sbatch composed the job from fresher data (slurm.ComposedTag).
local COMPOSED_TAG = "llmgw:composed"
local MAX_MODEL_NAME = 64
-- The SPANK option as slurmctld sees it in spank_job_env, and the variable
-- the plugin sets there itself.
local SPANK_ENV_NAMES = { "_SLURM_SPANK_OPTION_llmgw_llmgw_model", "LLMGW_MODEL" }
-- --llmgw-warm (the job waits for its weights, issue 28): the option and
-- the variable the plugin sets; without the plugin, llmgw:warm in the
-- comment.
local SPANK_WARM_NAMES = { "_SLURM_SPANK_OPTION_llmgw_llmgw_warm", "LLMGW_WARM" }
local WARM_TAG = "llmgw:warm"
-- The directive llmgw's burst_buffer.lua answers (slurm/bb).
local WARM_DIRECTIVE = "#BB_LUA llmgw-warm"
local NO_VAL = 4294967294

local llmgw = {}
-- What the parts share and a site need not see: the constants above and the
-- helpers below, and what each part adds for the others.
local P = {
	PREFIX = PREFIX,
	MAX_EXPRESSION = MAX_EXPRESSION,
	COMMENT_TAG = COMMENT_TAG,
	COMPOSED_TAG = COMPOSED_TAG,
}

-- The feature file the coordinator writes. A site may set
-- llmgw.feature_file after loading the module; LLMGW_FEATURE_FILE in
-- slurmctld's environment overrides the default (the dev cluster uses that).
llmgw.feature_file = os.getenv("LLMGW_FEATURE_FILE") or "/var/lib/llmgw/features"

local function contains(list, v)
	for _, x in ipairs(list or {}) do
		if x == v then
			return true
		end
	end
	return false
end

-- valid_model mirrors catalog.ValidModelName.
function llmgw.valid_model(name)
	return type(name) == "string" and #name > 0 and #name <= MAX_MODEL_NAME
		and not name:find("[^A-Za-z0-9._-]")
end

local function trim(s)
	return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- has_token: token is one of s's whitespace-separated fields. Found in
-- place, without splitting s into a table: it runs for every submission.
local function has_token(s, token)
	if s == nil then
		return false
	end
	local init = 1
	while true do
		local i, j = s:find(token, init, true)
		if not i then
			return false
		end
		if (i == 1 or s:find("^%s", i - 1)) and (j == #s or s:find("^%s", j + 1)) then
			return true
		end
		init = i + 1
	end
end

-- model_from_comment: the rest of the first field that starts with
-- llmgw:model= and goes on, found in place as has_token is (every
-- submission, a model or not, asks).
function llmgw.model_from_comment(comment)
	if comment == nil then
		return nil
	end
	local init = 1
	while true do
		local i, j = comment:find(COMMENT_TAG, init, true)
		if not i then
			return nil
		end
		if i == 1 or comment:find("^%s", i - 1) then
			local rest = comment:match("^%S+", j + 1)
			if rest then
				return rest
			end
		end
		init = i + 1
	end
end

P.contains, P.trim, P.has_token = contains, trim, has_token

-- The parts, beside this file: the composition (llmgw_compose.lua, the
-- twin of slurm/prefer.go) and the feature file (llmgw_features.lua). Each
-- is a chunk called with (llmgw, P). A site loads this file alone, by
-- whatever path (dofile), and this file finds the rest beside itself.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)[^/]*$") or "./"
for _, part in ipairs({ "llmgw_compose.lua", "llmgw_features.lua" }) do
	local chunk, err = loadfile(dir .. part)
	if not chunk then
		error("llmgw: cannot load " .. dir .. part .. " (the parts of llmgw_submit.lua are installed beside it): " .. tostring(err), 0)
	end
	chunk(llmgw, P)
end
local place, mentions = P.place, P.mentions

-- The feature file as last looked at (llmgw.features).
local looked = P.looked

-- What this Lua state has seen of slurmctld's tables (see the top): each
-- partition's record pointer as last seen, and when slurmctld was last seen
-- to rebuild them (nil until a pointer was seen at all).
local seen_parts = nil
local rebuilt_at = nil

-- note_tables notes the partition record pointers of a submission's
-- part_list (22.05: each entry's metatable holds _part_rec_ptr); one unlike
-- the last seen for its partition, or the first seen since the script was
-- loaded, means slurmctld rebuilt its tables at or before now.
function llmgw.note_tables(part_list, now)
	local next_seen, any = {}, false
	for name, ptr in pairs(seen_parts or {}) do
		next_seen[name] = ptr
	end
	local changed = seen_parts == nil
	for name, rec in pairs(part_list or {}) do
		local mt = type(rec) == "table" and getmetatable(rec) or nil
		local ptr = type(mt) == "table" and rawget(mt, "_part_rec_ptr") or nil
		if ptr ~= nil then
			any = true
			if seen_parts and seen_parts[name] ~= nil and seen_parts[name] ~= ptr then
				changed = true
			end
			next_seen[name] = ptr
		end
	end
	if not any then
		return
	end
	seen_parts = next_seen
	if changed then
		rebuilt_at = now
	end
end

-- forget_tables drops what was seen: no preference until a submission's
-- partition records are seen again, as after a load.
function llmgw.forget_tables()
	seen_parts, rebuilt_at = nil, nil
end

-- fresh says whether the feature file's lines can be trusted now: true, or
-- nil, why not, and true as a third value when the only doubt is the file's
-- age: no rebuild of slurmctld's tables since the sync (which is what wipes
-- features and what applies a changed SchedulerParameters), only a
-- coordinator that has not synced for a while. A node may have lost a
-- feature since then, but the header's prefer=fallback still describes the
-- running slurmctld.
function llmgw.fresh(header, now)
	if not rebuilt_at then
		return nil, "slurmctld's partition records are not visible here, so a reconfigure that wiped the features would go unseen"
	end
	local synced, interval = header and header.synced, header and header.interval
	if not synced or not interval then
		return nil, "the feature file's header has no synced= and interval= (written by an older coordinator?)"
	end
	-- The rebuild first: after a slurmctld restart the file is often too
	-- old as well (the coordinator cannot sync while slurmctld is down),
	-- and then the restart, not the coordinator, is why. Whole seconds: a
	-- sync that began in the same second as the rebuild may have read
	-- Slurm before it.
	if synced <= rebuilt_at then
		return nil, string.format("slurmctld rebuilt its tables (scontrol reconfigure, a restart or a new script) at %d, and the feature file was last synced at %d (%d s ago), not after: until the coordinator's next sync, Slurm may lack the features it lists",
			rebuilt_at, synced, now - synced)
	end
	if now - synced > 2 * interval then
		return nil, string.format("the feature file was last synced %d s ago, over twice the coordinator's interval of %s s (is the coordinator running?)",
			now - synced, tostring(interval)), true
	end
	return true
end

-- model_from_job: the SPANK option first (it is what the hooks will see),
-- then the comment tag. Returns model, from_spank.
-- spank_value: the value of the first of names set in the job's spank
-- environment, or nil.
local function spank_value(job_desc, names)
	local env = job_desc.spank_job_env
	if type(env) ~= "table" then
		return nil
	end
	-- Keys run from 0 (docs/slurm/behaviour.md §6).
	local i = 0
	while env[i] ~= nil or env[i + 1] ~= nil do
		local kv = env[i]
		if type(kv) == "string" then
			for _, name in ipairs(names) do
				if kv:sub(1, #name + 1) == name .. "=" then
					return kv:sub(#name + 2)
				end
			end
		end
		i = i + 1
	end
	return nil
end

function llmgw.model_from_job(job_desc)
	local v = spank_value(job_desc, SPANK_ENV_NAMES)
	if v then
		return v, true
	end
	local m = llmgw.model_from_comment(job_desc.comment)
	if m then
		return m, false
	end
	return nil
end

-- wants_warm: whether the job asked to wait for its weights.
function llmgw.wants_warm(job_desc)
	if spank_value(job_desc, SPANK_WARM_NAMES) then
		return true
	end
	local c = job_desc.comment
	return type(c) == "string" and c:find(WARM_TAG, 1, true) ~= nil and has_token(c, WARM_TAG)
end

-- default_partitions: slurmctld's default partitions, comma-separated, for
-- a job that names none; a string, not a table, since it is part of a kept
-- placement's key and most submissions need nothing more.
local function default_partitions(part_list)
	local list = ""
	for _, rec in pairs(part_list or {}) do
		if rec.flag_default and rec.flag_default ~= 0 and rec.name then
			list = list == "" and rec.name or (list .. "," .. rec.name)
		end
	end
	return list
end

-- note_admin adds "llmgw: <text>" to the job's AdminComment; note_llmgw
-- adds a note that begins with "llmgw: " already (a kept one: see
-- placement).
local function note_llmgw(job_desc, c)
	if job_desc.admin_comment and job_desc.admin_comment ~= "" then
		c = job_desc.admin_comment .. "; " .. c
	end
	if #c > MAX_EXPRESSION then
		c = c:sub(1, MAX_EXPRESSION)
	end
	job_desc.admin_comment = c
end

local function note_admin(job_desc, text)
	note_llmgw(job_desc, "llmgw: " .. text)
end

-- named begins every note of a job with a model: the model and where it
-- came from, so that scontrol show job tells which of llmgw's pieces saw
-- it.
local function named(model, from_spank)
	return "model " .. model .. (from_spank and " (--llmgw-model)" or " (comment)")
end

-- At most this many placements are kept per version of the feature file;
-- past it they are dropped and built again as jobs ask.
local MAX_PLACEMENTS = 1024

-- placement makes place's answer for a job's request and keeps it in the
-- index of the feature file's nodes (so dropped with it when the nodes
-- change), keyed by everything place reads from the job: model,
-- partitions, constraint, preference, excluded nodes, whether it names its
-- nodes, and node count; apply looks it up there first.
-- Jobs of a cluster ask the same few things over and over (an array, a
-- pipeline, a team's script), so after the first such job a submission
-- costs a few table lookups, not a composition; the note for AdminComment
-- is kept ready-made too, one for each place the model can come from.
-- scripts/bench/job-submit.sh measures both ("model", "new request").
local function placement(index, model, nodes, job_desc, plist, nodelist, constraint, prefer, exclude, complete)
	local parts = {}
	for p in plist:gmatch("[^,]+") do
		parts[#parts + 1] = p
	end
	local placed = place({
		model = model,
		constraint = job_desc.features,
		prefer = job_desc.prefer,
		nodes = nodes,
		exclude = llmgw.expand(job_desc.exc_nodes),
		nodelist = nodelist,
		partitions = parts,
		complete = complete,
	}, index)
	if placed.exclude then
		placed.exc_nodes = table.concat(placed.exclude, ",")
	end
	local rest = (#parts > 0 and (" in " .. table.concat(parts, ",")) or "") .. ": " .. table.concat(placed.notes, "; ")
	placed.what_spank = "llmgw: " .. named(model, true) .. rest
	placed.what_comment = "llmgw: " .. named(model, false) .. rest
	if index.nplacements >= MAX_PLACEMENTS then
		index.placements, index.nplacements = {}, 0
	end
	local t = index.placements
	for _, k in ipairs({ model, plist, constraint, prefer, exclude, nodelist }) do
		local sub = t[k]
		if not sub then
			sub = {}
			t[k] = sub
		end
		t = sub
	end
	t[nodes] = placed
	index.nplacements = index.nplacements + 1
	return placed
end

-- The model names found valid: a cluster uses a few, and a lookup costs
-- less than the pattern, for every job that names one. Bounded, since the
-- names come from users.
local MAX_VALID_NAMES = 1024
local valid_names, nvalid_names = {}, 0

-- apply does the work; llmgw.submit guards it.
local function apply(job_desc, part_list, now)
	local model, from_spank = llmgw.model_from_job(job_desc)
	if not model then
		return
	end
	if not valid_names[model] then
		if not llmgw.valid_model(model) then
			note_admin(job_desc, "model " .. model .. " is not a valid model name; nothing added")
			return
		end
		if nvalid_names >= MAX_VALID_NAMES then
			valid_names, nvalid_names = {}, 0
		end
		valid_names[model], nvalid_names = true, nvalid_names + 1
	end
	if llmgw.wants_warm(job_desc) and job_desc.user_id == 0 then
		-- burst_buffer/lua refuses root a burst buffer, and would reject
		-- the job: llmgw never rejects one (docs/slurm/behaviour.md §12).
		note_admin(job_desc, "model " .. model .. ": root's jobs cannot wait for their weights (Slurm gives root no burst buffer); it starts as any other")
	elseif llmgw.wants_warm(job_desc) then
		-- burst_buffer/lua then asks llmgw at each stage-in poll whether
		-- the planned nodes hold the model (slurm/bb/burst_buffer.lua);
		-- without that plugin the directive is not read and the job runs
		-- as any other. The note tells the prefetcher the job waits.
		local bb = job_desc.burst_buffer
		if type(bb) ~= "string" or not bb:find(WARM_DIRECTIVE, 1, true) then
			job_desc.burst_buffer = (type(bb) == "string" and bb ~= "" and (bb .. "\n") or "") .. WARM_DIRECTIVE
		end
		note_admin(job_desc, WARM_TAG)
	end
	if job_desc.comment and job_desc.comment:find(COMPOSED_TAG, 1, true) and has_token(job_desc.comment, COMPOSED_TAG) then
		note_admin(job_desc, "model " .. model .. ": composed by llmgw sbatch")
		return
	end
	if job_desc.prefer and job_desc.prefer ~= "" and mentions(job_desc.prefer, PREFIX .. model) then
		-- llmgw sbatch composed it already, from fresher features.
		note_admin(job_desc, "model " .. model .. ": preference already set")
		return
	end
	-- llmgw.features, called only when this second's look does not stand.
	local path, index, header = llmgw.feature_file, looked.index, looked.header
	if now ~= looked.at or path ~= looked.path then
		index, header = llmgw.features(path, now)
	end
	if not index then
		note_admin(job_desc, named(model, from_spank) .. ": no preference: feature file " .. tostring(header))
		slurm.log_info("llmgw: job for %s: no preference: feature file: %s", model, tostring(header))
		return
	end
	local nodes = job_desc.min_nodes
	if type(nodes) ~= "number" or nodes >= NO_VAL then
		nodes = 1
	end
	-- The gate's answer is kept with this second's look (looked.gate): the
	-- same header and second give the same answer until a rebuild is seen.
	local gate = looked.gate
	if not gate or gate.rebuilt_at ~= rebuilt_at then
		local fresh, why, only_old = llmgw.fresh(header, now)
		gate = { rebuilt_at = rebuilt_at, fresh = fresh, why = why, only_old = only_old }
		looked.gate = gate
	end
	local fresh, why, only_old = gate.fresh, gate.why, gate.only_old
	local stale_note
	if not fresh then
		-- With ignore_prefer_validation a single-node job whose preference
		-- no node meets any more falls back to its constraint on every
		-- release; a counted multi-node one is parked instead on 24.11 and
		-- 26.05 (docs/slurm/RELEASES.md, "ignore_prefer_validation"), so it
		-- keeps the gate. After a rebuild the flag itself may be out of
		-- date (the rebuild may have turned the option off): gate.
		if not (only_old and header.fallback and nodes == 1) then
			note_admin(job_desc, named(model, from_spank) .. ": no preference: " .. why)
			slurm.log_info("llmgw: job for %s: no preference: %s", model, why)
			return
		end
		stale_note = why .. ", but slurmctld ignores prefer validation and a single-node job falls back by itself"
	end
	local plist = job_desc.partition
	if plist == nil or plist == "" then
		plist = default_partitions(part_list)
	end
	local nodelist = job_desc.req_nodes ~= nil and job_desc.req_nodes ~= ""
	local constraint, prefer, exclude = job_desc.features or "", job_desc.prefer or "", job_desc.exc_nodes or ""
	-- The kept placement, if this request was asked before: a tree of
	-- tables, one level per part of the request, rather than one string
	-- key, since the parts are strings slurmctld made already, so looking
	-- them up allocates nothing, where joining them made a new string (and
	-- a number turned into one) for every job.
	local placed = index.placements[model]
	placed = placed and placed[plist]
	placed = placed and placed[constraint]
	placed = placed and placed[prefer]
	placed = placed and placed[exclude]
	placed = placed and placed[nodelist]
	placed = placed and placed[nodes]
	if not placed then
		placed = placement(index, model, nodes, job_desc, plist, nodelist, constraint, prefer, exclude, header.all == true)
	end
	if placed.prefer then
		job_desc.prefer = placed.prefer
	end
	if placed.exc_nodes then
		job_desc.exc_nodes = placed.exc_nodes
	end
	-- The comment stays as it is: compose tags it with the model unless the
	-- model came from the SPANK option or the comment has the tag, and here
	-- the model came from one or the other (llmgw.model_from_job).
	-- TestLuaSiteScriptMatchesShipped holds the comment to Compose's.
	local what = from_spank and placed.what_spank or placed.what_comment
	if stale_note then
		what = what .. " (" .. stale_note .. ")"
	end
	note_llmgw(job_desc, what)
	slurm.log_info("%s", what)
end

-- submit is what a site's slurm_job_submit calls (job_submit.lua beside
-- this file is the whole of it for a site without one): the arguments as
-- slurmctld passes them, and slurm.SUCCESS back, always. llmgw never
-- rejects a job: a site that wants to reject one does so with its own code,
-- before or after this call.
function llmgw.submit(job_desc, part_list, submit_uid)
	-- Every submission, with a model or not, so that a rebuild is seen as
	-- soon as possible.
	local now = llmgw.now()
	local noted, nerr = pcall(llmgw.note_tables, part_list, now)
	if not noted then
		slurm.log_error("llmgw: noting slurmctld's partition records: %s", tostring(nerr))
		-- A rebuild could have gone unseen: trust no file until one is.
		llmgw.forget_tables()
	end
	local ok, err = pcall(apply, job_desc, part_list, now)
	if not ok then
		-- Never reject a job on llmgw's account.
		slurm.log_error("llmgw: job_submit failed, job left as submitted: %s", tostring(err))
		pcall(note_admin, job_desc, "error, nothing added: " .. tostring(err))
	end
	return slurm.SUCCESS
end

-- modify is what a site's slurm_job_modify calls. A modified job keeps the
-- preference it was given at submit; the partition records are noted, as
-- at a submission, so that a rebuild is seen sooner.
function llmgw.modify(job_desc, job_rec, part_list, modify_uid)
	if not pcall(llmgw.note_tables, part_list, llmgw.now()) then
		llmgw.forget_tables()
	end
	return slurm.SUCCESS
end

return llmgw
