--[[
llmgw's job_submit.lua, for a site without a job_submit.lua of its own:
install it as job_submit.lua beside slurm.conf and set JobSubmitPlugins=lua.
A site with its own script keeps it and calls the module from it instead
(slurm/lua/llmgw_submit.lua says how).

The module is found at LLMGW_SUBMIT_MODULE in slurmctld's environment (a
development tree), else beside this script as slurmctld loaded it, else at
/usr/share/llmgw/llmgw_submit.lua, where the package installs it.
slurmctld reloads this script only when its mtime changes, not the module's:
after upgrading llmgw, touch this file.
]]

local function module_path()
	local env = os.getenv("LLMGW_SUBMIT_MODULE")
	if env and env ~= "" then
		return env
	end
	local src = debug.getinfo(1, "S").source
	local dir = src:sub(1, 1) == "@" and src:match("^@(.*/)[^/]*$")
	if dir then
		local f = io.open(dir .. "llmgw_submit.lua", "r")
		if f then
			f:close()
			return dir .. "llmgw_submit.lua"
		end
	end
	return "/usr/share/llmgw/llmgw_submit.lua"
end

-- A module that will not load must not stop slurmctld or reject a job on
-- llmgw's account: every job then passes untouched, and the log says why.
local path = module_path()
local loaded, llmgw = pcall(dofile, path)
if not loaded or type(llmgw) ~= "table" then
	slurm.log_error("llmgw: cannot load the job_submit module %s: %s; jobs pass without a preference until it loads (install it, or set LLMGW_SUBMIT_MODULE, then touch this script)",
		path, tostring(llmgw))
	llmgw = nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if not llmgw then
		return slurm.SUCCESS
	end
	return llmgw.submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if not llmgw then
		return slurm.SUCCESS
	end
	return llmgw.modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
