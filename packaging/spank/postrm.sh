#!/bin/sh
# Takes the plugin out of Slurm's plugstack (see postinst.sh): a line
# naming a missing plugin makes every client print an error. On upgrade
# (deb: upgrade; rpm: 1) the line stays.
set -e
case "$1" in upgrade | 1) exit 0 ;; esac
conf=/etc/slurm/plugstack.conf.d/llmgw.conf
line='optional /usr/lib/llmgw/llmgw_spank.so'
[ -e "$conf" ] || exit 0
grep -vxF "$line" "$conf" >"$conf.new.$$" || true
if grep -qv '^#' "$conf.new.$$"; then
	mv "$conf.new.$$" "$conf"
else
	rm -f "$conf.new.$$" "$conf"
fi
exit 0
