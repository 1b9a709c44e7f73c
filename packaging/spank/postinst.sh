#!/bin/sh
# Names the plugin in Slurm's plugstack. Debian's /etc/slurm/plugstack.conf
# includes plugstack.conf.d/*.conf; elsewhere add
# `include /etc/slurm/plugstack.conf.d/*.conf` to the file PlugStackConfig
# names. "optional", never "required": with "required" a plugin that fails
# to load (a Slurm upgraded under it with --force-depends) makes every
# sbatch/srun/salloc fail and slurmd refuse to start; "optional" loses only
# --llmgw-model, and `llmgw doctor` says why.
set -e
conf=/etc/slurm/plugstack.conf.d/llmgw.conf
line='optional /usr/lib/llmgw/llmgw_spank.so'
mkdir -p /etc/slurm/plugstack.conf.d
if ! grep -qxF "$line" "$conf" 2>/dev/null; then
	[ -e "$conf" ] || printf '# llmgw SPANK plugin (--llmgw-model); managed by the llmgw-spank package\n' >"$conf"
	printf '%s\n' "$line" >>"$conf"
fi
exit 0
