--[[
llmgw_compose.lua: the composition of llmgw's job_submit module, the twin
of slurm/prefer.go's Compose (slurm/lua_test.go runs both on the same
table, slurm/testdata/compose/cases.json, and on random inputs): which
preference, which exclusion and which comment tag a job gets, counted from
an index of the nodes kept per version of the feature file. Loaded by
llmgw_submit.lua, which passes the module's table and its parts' shared
one.
]]
local llmgw, P = ...
local PREFIX, MAX_EXPRESSION, COMMENT_TAG, COMPOSED_TAG = P.PREFIX, P.MAX_EXPRESSION, P.COMMENT_TAG, P.COMPOSED_TAG
local contains, trim, has_token = P.contains, P.trim, P.has_token

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

-- has: the node (or class) carries feature f.
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

-- part_set: the set of partitions a comma-separated list names, with the
-- list itself in .list; one per distinct list in ix.part_sets.
local function part_set(ix, parts)
	local pset = ix.part_sets[parts]
	if not pset then
		pset = { list = {} }
		for p in parts:gmatch("[^,]+") do
			if not pset[p] then
				pset[p] = true
				pset.list[#pset.list + 1] = p
			end
		end
		ix.part_sets[parts] = pset
	end
	return pset
end

--[[
The index compose counts nodes with, one per version of the feature file.

What a job asks of it is a count: in the job's partition, how many nodes
meet its expression, and how many of those hold its model. The expression
names the site's features (the fabric), rarely llmgw's. So the index keeps
the nodes folded into classes, nodes alike but for llmgw's features (the
same partitions and the same other features), and per llmgw feature the
number of its holders in each class:

    ix.classes[c] = {count=, parts=, pset=, feats=",<site features>,"}
    ix.held[feature][c] = holders in class c

which the coordinator writes at the top of the feature file (#c and #h
lines, FeatureFile), so that a new version of the file costs the module a
few hundred short lines, not 10,000 node lines: 47 ms at 10,000 nodes
before, under slurmctld's locks, for the first job after every change.

The nodes themselves are needed only for what the classes cannot answer:
a node the job excludes (ix.named, which the feature file answers by
finding the node's line) and an expression that names another llmgw
feature than the model's (ix.nodes: every node, by partition and name,
read in full). index_nodes builds all of it from a list; the feature
file's index builds the classes at once and the rest when first asked.
]]

-- class_of: what a node's class is keyed by besides its partitions, its
-- features that are not llmgw's, sorted, and its llmgw features, each
-- once.
local function class_of(feats)
	local site, ours, seen = {}, {}, {}
	for f in feats:gmatch("[^,]+") do
		if not seen[f] then
			seen[f] = true
			if f:sub(1, #PREFIX) == PREFIX then
				ours[#ours + 1] = f
			else
				site[#site + 1] = f
			end
		end
	end
	table.sort(site)
	return table.concat(site, ","), ours
end

-- new_index: an index with no classes yet.
local function new_index()
	return { classes = {}, held = {}, part_sets = {}, projections = {}, nprojections = 0,
		placements = {}, nplacements = 0 }
end

-- add_class adds a class of count nodes (partitions and site features
-- comma-separated) and returns its number.
local function add_class(ix, count, parts, site)
	local c = { count = count, parts = parts, pset = part_set(ix, parts), feats = "," .. site .. "," }
	ix.classes[#ix.classes + 1] = c
	return #ix.classes
end

-- index_node_lists fills ix's node lists (all, by_part, by_name) from nodes.
local function index_node_lists(ix, nodes)
	ix.all, ix.by_name, ix.by_part = nodes, {}, {}
	for _, nd in ipairs(nodes) do
		nd.pset = part_set(ix, nd.parts)
		for _, p in ipairs(nd.pset.list) do
			local l = ix.by_part[p] or {}
			l[#l + 1] = nd
			ix.by_part[p] = l
		end
		local l = ix.by_name[nd.name] or {}
		l[#l + 1] = nd
		ix.by_name[nd.name] = l
	end
end

-- index_nodes indexes nodes (made by node) for compose: the classes and
-- holders, and the node lists.
local function index_nodes(nodes)
	local ix = new_index()
	local at = {}
	for _, nd in ipairs(nodes) do
		local site, ours = class_of(nd.feats)
		local key = nd.parts .. " " .. site
		local c = at[key]
		if not c then
			c = add_class(ix, 0, nd.parts, site)
			at[key] = c
		end
		ix.classes[c].count = ix.classes[c].count + 1
		for _, f in ipairs(ours) do
			local h = ix.held[f] or {}
			h[c] = (h[c] or 0) + 1
			ix.held[f] = h
		end
	end
	index_node_lists(ix, nodes)
	return ix
end

-- nodes_of: the index's nodes (read when first asked), all or those in
-- partition p.
local function nodes_of(ix, p)
	if not ix.all then
		ix.load_nodes(ix)
	end
	if p then
		return ix.by_part[p] or {}
	end
	return ix.all
end

-- named: the nodes called name (one, or none).
local function named(ix, name)
	if ix.by_name then
		return ix.by_name[name] or {}
	end
	return ix.find_node(ix, name)
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
	for _, nd in ipairs(named(ix, name)) do
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
-- inside slurmctld for every submission, under its locks. The groups come
-- from the classes and their holders, or, for an expression that names
-- another llmgw feature, from the nodes themselves. They are kept for the
-- next job of the same partition, model and features.
local function project(ix, p, feature, features)
	local names, seen = {}, {}
	local by_node = false
	for _, f in ipairs(features or {}) do
		if not seen[f] then
			names[#names + 1], seen[f] = f, true
			if f ~= feature and f:sub(1, #PREFIX) == PREFIX then
				by_node = true
			end
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
	-- add counts count nodes that hold the feature or not (h) and carry
	-- what has_f says of each name.
	local function add(count, h, has_f)
		if count <= 0 then
			return
		end
		sig[1] = h and "1" or "0"
		for i, f in ipairs(names) do
			sig[i + 1] = has_f(f) and "1" or "0"
		end
		local s = table.concat(sig)
		local g = by_sig[s]
		if not g then
			g = { count = 0, held = h, set = {} }
			for _, f in ipairs(names) do
				g.set[f] = has_f(f) or nil
			end
			by_sig[s] = g
			groups[#groups + 1] = g
		end
		g.count = g.count + count
	end
	if by_node then
		for _, nd in ipairs(nodes_of(ix, p)) do
			add(1, held(ix, nd.name, feature), function(f)
				return has(nd, f)
			end)
		end
	else
		local holders = ix.held[feature] or {}
		for c, cl in ipairs(ix.classes) do
			if not p or cl.pset[p] then
				local h = holders[c] or 0
				add(h, true, function(f)
					return f == feature or has(cl, f)
				end)
				add(cl.count - h, false, function(f)
					return f ~= feature and has(cl, f)
				end)
			end
		end
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
					for _, nd in ipairs(named(ix, name)) do
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

P.place, P.mentions, P.node, P.part_set, P.new_index, P.add_class, P.index_nodes, P.index_node_lists =
	place, mentions, node, part_set, new_index, add_class, index_nodes, index_node_lists
