#!/bin/sh
# Before removal (deb: remove, not upgrade; rpm: 0 = erase, not upgrade).
# Stops the daemons so none keeps running from deleted files. An upgrade
# leaves them running: the admin restarts them when ready.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		systemctl stop llmgw-agent.service llmgw-coordinator.service >/dev/null 2>&1 || true
	fi
	;;
esac
exit 0
