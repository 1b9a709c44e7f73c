#!/bin/sh
# After install or upgrade (deb: configure; rpm: 1 or 2). Creates the
# admin token the shipped coordinator.toml names, when absent (each node's
# own token is made by an admin: llmgw nodes token NODE), and starts nothing: the
# admin decides where the agent and the coordinator run (systemctl enable
# --now llmgw-agent / llmgw-coordinator).
set -e

# token FILE: 32 random bytes as 64 hex characters, mode 0600, written under
# a temporary name first so a half-written token never exists. An existing
# file is never touched: it may be the coordinator's token, copied here.
token() {
	[ -e "$1" ] && return 0
	tmp="$1.new.$$"
	(
		umask 077
		od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$tmp"
		echo >>"$tmp"
	)
	chmod 0600 "$tmp"
	mv "$tmp" "$1"
}

mkdir -p /etc/llmgw
token /etc/llmgw/admin.token

# Make systemd see the new or changed units; enable and start nothing.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
