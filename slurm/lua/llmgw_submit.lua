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
why that is harmless); it is parsed only when its nodes changed (the
header's lines= digest); and what a request was given (preference,
exclusion, note) is kept for the next job that asks the same, until the
nodes change. A request not asked before costs a count over groups of
nodes that look alike to it, kept per partition, model and constraint.
scripts/bench/job-submit.sh measures each.

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

-- Feature expressions: the user's constraint and preference, ANDed. A tree
-- of features, & and | with parentheses, and at most one matching OR [a|b]
-- in all; counts, negation and other syntax are refused (slurm/prefer.go,
-- parseJobExpr).
local function parse_expr(s)
	local p = { s = s, i = 1, alts = 0, features = {} }
	local parse
	local function peek()
		return p.s:sub(p.i, p.i)
	end
	local function term(depth)
		if p.i > #p.s then
			error("missing a feature at the end", 0)
		end
		local c = peek()
		if c == "(" or c == "[" then
			if c == "[" and depth > 0 then
				error("a matching OR ([...]) inside parentheses or brackets", 0)
			end
			p.i = p.i + 1
			local node = parse(depth + 1, c == "[")
			local want = c == "[" and "]" or ")"
			if peek() ~= want then
				error("missing " .. want, 0)
			end
			p.i = p.i + 1
			return node
		end
		local start = p.i
		while p.i <= #p.s and not peek():find("[&|()%[%]]") do
			p.i = p.i + 1
		end
		local name = p.s:sub(start, p.i - 1)
		if name == "" then
			error("missing a feature before " .. peek(), 0)
		end
		if name:find("[*!,]") then
			error(name .. " uses a count, negation or list, which llmgw does not evaluate", 0)
		end
		p.features[#p.features + 1] = name
		return { op = "f", name = name }
	end
	parse = function(depth, in_bracket)
		local terms, op = {}, nil
		while true do
			terms[#terms + 1] = term(depth)
			if p.i > #p.s then
				break
			end
			local c = peek()
			if c == ")" or c == "]" then
				break
			end
			if c ~= "&" and c ~= "|" then
				error("unexpected " .. c, 0)
			end
			if op and op ~= c then
				error("& and | mixed without parentheses", 0)
			end
			op = c
			p.i = p.i + 1
		end
		if in_bracket then
			if op == "&" then
				error("a matching OR ([...]) joins alternatives with |", 0)
			end
			p.alts = #terms
			return { op = "[", children = terms }
		end
		for _, t in ipairs(terms) do
			if t.op == "[" and op == "|" then
				error("a matching OR ([...]) inside an OR", 0)
			end
		end
		if #terms == 1 then
			return terms[1]
		end
		return { op = op, children = terms }
	end
	local node = parse(0, false)
	if p.i <= #p.s then
		error("unexpected " .. peek(), 0)
	end
	return node, p.alts, p.features
end

local function eval(x, feats, alt)
	if x.op == "f" then
		return feats[x.name] == true
	elseif x.op == "&" then
		for _, c in ipairs(x.children) do
			if not eval(c, feats, alt) then
				return false
			end
		end
		return true
	elseif x.op == "|" then
		for _, c in ipairs(x.children) do
			if eval(c, feats, alt) then
				return true
			end
		end
		return false
	elseif x.op == "[" then
		return eval(x.children[alt], feats, alt)
	end
	return false
end

-- parse_job_expr returns {root=, alts=, features=} or nil and why.
local function parse_job_expr(constraint, prefer, complete)
	local e, ands = { alts = 0, features = {} }, {}
	for _, s in ipairs({ { "--constraint", constraint }, { "--prefer", prefer } }) do
		local flag, v = s[1], s[2]
		if v and trim(v) ~= "" then
			local ok, node, alts, feats = pcall(parse_expr, v)
			if not ok then
				return nil, "cannot read " .. flag .. "=" .. v .. " (" .. tostring(node) .. ")"
			end
			e.alts = e.alts + alts
			for _, f in ipairs(feats) do
				e.features[#e.features + 1] = f
			end
			if not complete then
				for _, f in ipairs(feats) do
					if f:sub(1, #PREFIX) ~= PREFIX then
						return nil, flag .. "=" .. v .. " names " .. f .. ", and the feature file lists only llmgw's features (written by an older coordinator?)"
					end
				end
			end
			ands[#ands + 1] = node
		end
	end
	local _, brackets = ((constraint or "") .. (prefer or "")):gsub("%[", "")
	if brackets > 1 then
		return nil, "more than one matching OR ([...]) in --constraint and --prefer"
	end
	if #ands == 1 then
		e.root = ands[1]
	elseif #ands > 1 then
		e.root = { op = "&", children = ands }
	end
	return e
end

local function mentions(expr, feature)
	if expr == nil or expr == "" then
		return false
	end
	for t in (expr or ""):gmatch("[^&|()%[%]*!]+") do
		if trim(t) == feature then
			return true
		end
	end
	return false
end

-- join_and: slurm/prefer.go joinAnd.
local function join_and(parts, count)
	local out = {}
	for i = 1, count do
		local p = trim(parts[i] or "")
		if p ~= "" then
			if i < count and not p:find("[", 1, true) then
				p = "(" .. p .. ")"
			end
			out[#out + 1] = p
		end
	end
	return table.concat(out, "&")
end

-- nested_parens: slurm/prefer.go nestedParens.
local function nested_parens(s)
	local depth = 0
	for c in s:gmatch("[()]") do
		if c == "(" then
			depth = depth + 1
			if depth > 1 then
				return true
			end
		else
			depth = depth - 1
		end
	end
	return false
end

-- flatten: slurm/prefer.go featureExpr.flatten; nil when x holds an OR.
local function flatten(x, alt)
	local out, seen = {}, {}
	local function walk(y)
		if y.op == "f" then
			if not seen[y.name] then
				out[#out + 1], seen[y.name] = y.name, true
			end
			return true
		elseif y.op == "&" then
			for _, c in ipairs(y.children) do
				if not walk(c) then
					return false
				end
			end
			return true
		elseif y.op == "[" then
			return walk(y.children[alt])
		end
		return false
	end
	if not walk(x) then
		return nil
	end
	return out
end

-- counted_prefer: slurm/prefer.go countedPrefer (why the brackets).
local function counted_prefer(ands, feature, k, n)
	local all = table.concat(ands, "&")
	local rest = all
	if #ands > 1 then
		rest = "(" .. all .. ")"
	end
	return "[(" .. all .. "&" .. feature .. ")*" .. k .. "&" .. rest .. "*" .. (n - k) .. "]"
end

-- A node, as compose keeps it: {name=, parts=<partitions, comma-separated>,
-- feats=",<feature>,<feature>,"}, strings as the feature file has them,
-- since splitting 10,000 lines into tables costs slurmctld more than the
-- few lookups a job needs.
local function node(name, parts, feats)
	return { name = name, parts = parts, feats = "," .. feats .. "," }
end

-- has: the node carries feature f.
local function has(nd, f)
	return nd.feats:find("," .. f .. ",", 1, true) ~= nil
end

-- feature_set is a node's features as a set, for eval.
local function feature_set(nd)
	local set = {}
	for f in nd.feats:gmatch("[^,]+") do
		set[f] = true
	end
	return set
end

-- index_nodes indexes nodes (made by node) for compose, once per version
-- of the feature file: by partition and by name. Nodes sharing a
-- partition list share its set. The projections cache (see project) starts
-- empty.
local function index_nodes(nodes)
	local ix = { all = nodes, by_name = {}, by_part = {}, part_sets = {}, projections = {}, nprojections = 0,
		placements = {}, nplacements = 0 }
	for _, nd in ipairs(nodes) do
		local pset = ix.part_sets[nd.parts]
		if not pset then
			pset = { list = {} }
			for p in nd.parts:gmatch("[^,]+") do
				if not pset[p] then
					pset[p] = true
					pset.list[#pset.list + 1] = p
				end
			end
			ix.part_sets[nd.parts] = pset
		end
		nd.pset = pset
		for _, p in ipairs(pset.list) do
			local l = ix.by_part[p] or {}
			l[#l + 1] = nd
			ix.by_part[p] = l
		end
		local l = ix.by_name[nd.name] or {}
		l[#l + 1] = nd
		ix.by_name[nd.name] = l
	end
	return ix
end

-- index_list indexes nodes given as {name=, partitions={...},
-- features={...}} (compose's input.cluster).
local function index_list(list)
	local nodes = {}
	for i, nd in ipairs(list) do
		nodes[i] = node(nd.name, table.concat(nd.partitions or {}, ","), table.concat(nd.features or {}, ","))
	end
	return index_nodes(nodes)
end

-- held: a node of that name carries the feature.
local function held(ix, name, feature)
	for _, nd in ipairs(ix.by_name[name] or {}) do
		if has(nd, feature) then
			return true
		end
	end
	return false
end

-- At most this many projections are kept per version of the feature file;
-- past it they are dropped and built again as jobs ask.
local MAX_PROJECTIONS = 64

-- project folds the nodes of partition p (every node when p is false) into
-- groups that look alike to one job: the same answer for the model's
-- feature and for each feature its expression names. A job's count then
-- walks the groups (a handful) instead of the nodes (thousands): this runs
-- inside slurmctld for every submission, under its locks. The groups are
-- kept for the next job of the same partition, model and features.
local function project(ix, p, feature, features)
	local names, seen = {}, {}
	for _, f in ipairs(features or {}) do
		if not seen[f] then
			names[#names + 1], seen[f] = f, true
		end
	end
	table.sort(names)
	local key = tostring(p) .. "\n" .. feature .. "\n" .. table.concat(names, "\n")
	local groups = ix.projections[key]
	if groups then
		return groups
	end
	local by_sig = {}
	groups = {}
	local sig = {}
	for _, nd in ipairs(p and (ix.by_part[p] or {}) or ix.all) do
		local h = held(ix, nd.name, feature)
		sig[1] = h and "1" or "0"
		for i, f in ipairs(names) do
			sig[i + 1] = has(nd, f) and "1" or "0"
		end
		local s = table.concat(sig)
		local g = by_sig[s]
		if not g then
			g = { count = 0, held = h, set = {} }
			for _, f in ipairs(names) do
				g.set[f] = has(nd, f) or nil
			end
			by_sig[s] = g
			groups[#groups + 1] = g
		end
		g.count = g.count + 1
	end
	if ix.nprojections >= MAX_PROJECTIONS then
		ix.projections, ix.nprojections = {}, 0
	end
	ix.projections[key] = groups
	ix.nprojections = ix.nprojections + 1
	return groups
end

-- tag_comment: compose's comment, and its notes, in out. Apart from place
-- because it depends on the job's comment, which a submission rarely shares
-- with another: llmgw.submit keeps place's answer per request, and has no
-- comment to tag (see apply).
local function tag_comment(input, out)
	local function note(s)
		out.notes[#out.notes + 1] = s
	end
	local model = input.model
	local tags = {}
	if input.spank then
		out.spank_model = model
	elseif not has_token(input.comment, COMMENT_TAG .. model) then
		tags[#tags + 1] = COMMENT_TAG .. model
	end
	if input.composed and not has_token(input.comment, COMPOSED_TAG) then
		tags[#tags + 1] = COMPOSED_TAG
	end
	while #tags > 0 do
		local c = table.concat(tags, " ")
		if input.comment and input.comment ~= "" then
			c = input.comment .. " " .. c
		end
		if #c <= MAX_EXPRESSION then
			out.comment = c
			break
		end
		note("comment not tagged with " .. tags[#tags] .. ": it would pass Slurm's limit of " .. MAX_EXPRESSION)
		tags[#tags] = nil
	end
end

-- place: compose's preference and exclusion for the nodes of ix, as
-- {prefer=, exclude=, holders=, notes={...}}. Nothing in it depends on the
-- job's comment: llmgw.submit keeps it per request (see remember).
local function place(input, ix)
	local out = { notes = {} }
	local function note(s)
		out.notes[#out.notes + 1] = s
	end
	local model = input.model
	local feature = PREFIX .. model
	local n = input.nodes or 0
	if n < 1 then
		n = 1
	end

	local user_excl = {}
	for _, x in ipairs(input.exclude or {}) do
		user_excl[x] = true
	end
	local ours = {}
	for _, x in ipairs(input.no_room or {}) do
		if not held(ix, x, feature) and not user_excl[x] and not contains(ours, x) then
			ours[#ours + 1] = x
		end
	end

	local expr, why
	if input.nodelist then
		why = "the job names its nodes (--nodelist)"
	elseif mentions(input.prefer, feature) then
		why = "the job's --prefer already asks for " .. feature
	else
		expr, why = parse_job_expr(input.constraint, input.prefer, input.complete)
	end

	-- count: slurm/prefer.go's count; holders per alternative first.
	local function count(x, excl)
		local parts = input.partitions or {}
		if #parts == 0 then
			parts = { false }
		end
		local eligible, per_alt = -1, {}
		local nalts = math.max(x.alts, 1)
		for _, p in ipairs(parts) do
			local groups = project(ix, p, feature, x.features)
			local best_e = 0
			for alt = 1, nalts do
				local e, h = 0, 0
				for _, g in ipairs(groups) do
					if x.root == nil or eval(x.root, g.set, alt) then
						e = e + g.count
						if g.held then
							h = h + g.count
						end
					end
				end
				-- The excluded nodes, taken back out one by one.
				for name in pairs(excl) do
					for _, nd in ipairs(ix.by_name[name] or {}) do
						if (p == false or nd.pset[p]) and (x.root == nil or eval(x.root, feature_set(nd), alt)) then
							e = e - 1
							if held(ix, name, feature) then
								h = h - 1
							end
						end
					end
				end
				best_e = math.max(best_e, e)
				if e < n then
					h = 0
				end
				if per_alt[alt] == nil or h < per_alt[alt] then
					per_alt[alt] = h
				end
			end
			if eligible < 0 or best_e < eligible then
				eligible = best_e
			end
		end
		local holders, best_alt = 0, 1
		for alt = 1, nalts do
			if per_alt[alt] > holders then
				holders, best_alt = per_alt[alt], alt
			end
		end
		return eligible, holders, best_alt
	end

	-- slurm/prefer.go: no exclusion that could make Slurm reject the job.
	local excl = user_excl
	if #ours > 0 then
		if not expr then
			note("not excluding " .. table.concat(ours, ",") .. ": " .. why)
			ours = {}
		else
			local trial = {}
			for x in pairs(user_excl) do
				trial[x] = true
			end
			for _, x in ipairs(ours) do
				trial[x] = true
			end
			if count(expr, trial) >= n then
				excl = trial
			else
				if count(expr, user_excl) >= n then
					note("not excluding " .. table.concat(ours, ",") .. ": too few nodes would be left")
				end
				ours = {}
			end
		end
	end
	if #ours > 0 then
		local all, seen = {}, {}
		for _, x in ipairs(input.exclude or {}) do
			if not seen[x] then
				all[#all + 1], seen[x] = x, true
			end
		end
		for _, x in ipairs(ours) do
			if not seen[x] then
				all[#all + 1], seen[x] = x, true
			end
		end
		table.sort(all)
		out.exclude = all
		note("excluding " .. table.concat(ours, ",") .. ": no room for " .. model)
	end

	if not expr then
		note("no preference for " .. feature .. ": " .. why)
		return out
	end
	local _, k, alt = count(expr, excl)
	if k == 0 then
		note("no preference: no node in the job's partition holds " .. model)
		return out
	end
	local prefer
	if n <= k then
		prefer = join_and({ input.constraint, input.prefer, feature }, 3)
	elseif expr.root == nil then
		prefer = feature .. "*" .. k
	else
		local ands = flatten(expr.root, alt)
		if not ands then
			note("no preference: " .. k .. " of the job's " .. n .. " nodes hold " .. model
				.. ", and Slurm (from 23.02) takes a count beside other features only inside [...], where the job's expression cannot go (it has an OR (|) outside a matching OR)")
			return out
		end
		prefer = counted_prefer(ands, feature, k, n)
	end
	if nested_parens(prefer) then
		note("no preference: prefer=" .. prefer .. " puts parentheses inside parentheses, which Slurm refuses, rejecting the job")
		return out
	end
	if #prefer > MAX_EXPRESSION then
		note("no preference: it would be " .. #prefer .. " characters, over Slurm's limit of " .. MAX_EXPRESSION)
		return out
	end
	out.prefer = prefer
	out.holders = k
	note("prefer=" .. prefer)
	return out
end

-- compose is slurm.Compose: the same input fields (snake case as in
-- testdata/compose/cases.json) and the same result. The nodes come as
-- input.cluster (a list) or input.index (index_nodes of one, kept between
-- submissions).
function llmgw.compose(input)
	local out = { notes = {} }
	tag_comment(input, out)
	local placed = place(input, input.index or index_list(input.cluster or {}))
	out.prefer, out.exclude, out.holders = placed.prefer, placed.exclude, placed.holders
	for _, s in ipairs(placed.notes) do
		out.notes[#out.notes + 1] = s
	end
	return out
end

-- expand turns a Slurm hostlist ("n[1-3,7],login") into names.
function llmgw.expand(list)
	local out = {}
	if not list or list == "" then
		return out
	end
	local i, depth, start = 1, 0, 1
	local parts = {}
	for j = 1, #list do
		local c = list:sub(j, j)
		if c == "[" then
			depth = depth + 1
		elseif c == "]" then
			depth = depth - 1
		elseif c == "," and depth == 0 then
			parts[#parts + 1] = list:sub(start, j - 1)
			start = j + 1
		end
	end
	parts[#parts + 1] = list:sub(start)
	for _, part in ipairs(parts) do
		local pre, body, post = part:match("^([^%[]*)%[([^%]]*)%](.*)$")
		if not pre then
			if part ~= "" then
				out[#out + 1] = part
			end
		else
			for r in body:gmatch("[^,]+") do
				local lo, hi = r:match("^(%d+)-(%d+)$")
				if not lo then
					lo, hi = r, r
				end
				for v = tonumber(lo), tonumber(hi) do
					i = i + 1
					if i > 100000 then
						error("hostlist " .. list .. " is too long", 0)
					end
					out[#out + 1] = pre .. string.format("%0" .. #lo .. "d", v) .. post
				end
			end
		end
	end
	return out
end

-- The feature file, as the coordinator writes it (coordinator/features.go,
-- FeatureFile):
--   # llmgw features (generated by the coordinator; do not edit) synced=<unix seconds> interval=<seconds> features=all lines=<digest>
--   <node> <partitions comma-separated or -> <active features comma-separated or ->
-- parse_header reads the first line: {synced=, interval=, all=, lines=},
-- synced and interval nil when the header lacks them, all true when the
-- lines list every active feature (false: only llmgw's, from a coordinator
-- older than features=all), lines the digest of the node lines (nil from a
-- coordinator older than lines=); nil when the line is not the header.
local HEADER = "# llmgw features (generated by the coordinator; do not edit)"
local function parse_header(line)
	if not line or line:sub(1, #HEADER) ~= HEADER then
		return nil
	end
	local rest = line:sub(#HEADER + 1) .. " "
	return {
		synced = tonumber(rest:match("%ssynced=(%d+)")),
		interval = tonumber(rest:match("%sinterval=([%d.]+)")),
		all = rest:match("%sfeatures=all%s") ~= nil,
		lines = rest:match("%slines=(%x+)%s"),
		-- slurmctld had SchedulerParameters=ignore_prefer_validation when
		-- the coordinator synced: see llmgw.fresh.
		fallback = rest:match("%sprefer=fallback%s") ~= nil,
	}
end

-- read_nodes reads the node lines of an open feature file whose first line
-- (first) was read already; it returns the nodes, or nil and why.
local function read_nodes(f, path, first)
	local nodes, lineno, line = {}, 0, first
	while line do
		lineno = lineno + 1
		-- The node line first: it is nearly every line. A line that
		-- starts with # (the header among them) is a comment.
		local name, parts, feats = line:match("^(%S+)%s+(%S+)%s+(%S+)%s*$")
		if name and name:byte(1) ~= 35 then
			nodes[#nodes + 1] = node(name, parts == "-" and "" or parts, feats == "-" and "" or feats)
		elseif not line:match("^%s*#") and not line:match("^%s*$") then
			return nil, path .. " line " .. lineno .. ": want <node> <partitions> <features>"
		end
		line = f:read("*l")
	end
	return nodes
end

-- The feature file as last parsed, kept between submissions: slurmctld
-- keeps one Lua state and calls every submission through it, under its
-- locks, so the file is parsed and indexed only when it changed. What
-- tells: the header's lines= digest of the node lines (with the path, the
-- interval and features=all). The coordinator rewrites the file every
-- interval for the sync time alone, so a digest that stayed the same
-- means the nodes did. A file without lines= (an older coordinator) is
-- parsed on every submission, as before.
local loaded = { key = nil, index = nil, path = nil, first = nil, header = nil }

-- load_features returns the index of the feature file's nodes and its
-- header ({} when it has none), or nil and why. One open and one line read
-- per call when the nodes did not change. The header line itself is kept
-- too: between two syncs it is the very line read before, and then its
-- parsed header and the index stand as they are, without parsing it again
-- (half the call's cost at 10,000 nodes; scripts/bench/job-submit.sh).
function llmgw.load_features(path)
	local f, err = io.open(path, "r")
	if not f then
		return nil, err
	end
	local first = f:read("*l")
	if loaded.key and first == loaded.first and path == loaded.path then
		f:close()
		return loaded.index, loaded.header
	end
	local header = parse_header(first)
	local key = header and header.lines and table.concat({ path, header.lines, tostring(header.interval), tostring(header.all) }, "\n")
	if key and key == loaded.key then
		f:close()
		loaded.first, loaded.header = first, header
		return loaded.index, header
	end
	local nodes, why = read_nodes(f, path, first)
	f:close()
	if not nodes then
		return nil, why
	end
	local ix = index_nodes(nodes)
	loaded.key, loaded.index = key, ix
	loaded.path, loaded.first, loaded.header = path, first, header or {}
	return ix, header or {}
end

-- The clock; a test sets its own.
llmgw.now = os.time

-- The feature file as last looked at: when (llmgw.now()), which path, and
-- what load_features answered (the index and header, or nil and why), and
-- the freshness gate's answer for it (see apply).
local looked = { at = nil, path = nil, index = nil, header = nil, gate = nil }

-- features is load_features at most once per second of llmgw.now(): the
-- first submission that names a model in a second opens the file and reads
-- its header line; the others of that second take what it found, the
-- parsed index and header, or why there is none (a missing file is not
-- opened again either). An open alone costs several times what the rest of
-- a job costs (~9 µs against a few), and slurmctld pays it under its locks
-- for every submission; once a second it pays it once.
--
-- The price is that a rewrite of the file is seen up to one second late
-- (os.time() has whole seconds: a look at second s stands until the clock
-- reads another second, backwards too). Why that is harmless:
--   - the freshness gate (llmgw.fresh) only grows more careful with an
--     older header: a later file's synced= is no earlier, so a header the
--     gate trusts from the last look it would trust read afresh. A
--     reconfigure or a restart that wipes the features is seen in the
--     partition records at the submission itself, not through the file.
--   - the node lines trail Slurm already: the coordinator writes them after
--     its scontrol calls and the read-back, a debounce (1 s) after the
--     agents' reports, which come seconds after weights arrive or leave. A
--     feature Slurm dropped and the file still lists is a window the file
--     has anyway; this widens it by at most one second.
function llmgw.features(path, now)
	if now == looked.at and path == looked.path then
		return looked.index, looked.header
	end
	local index, header = llmgw.load_features(path)
	looked.at, looked.path, looked.index, looked.header = now, path, index, header
	-- The freshness gate's answer for this look: apply asks llmgw.fresh
	-- once per look and rebuild, not once per job.
	looked.gate = nil
	return index, header
end

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
		-- the job: llmgw never rejects one (docs/slurm/behaviour.md §11).
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
