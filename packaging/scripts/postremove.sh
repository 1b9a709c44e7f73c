#!/bin/sh
# After removal. deb purge also removes the tokens: the admin token
# postinstall created, the node's token an admin installed, and the agent
# token older versions created (none are package files, so dpkg does not
# know them), the resolved copy of
# agent.toml the hooks write, and the directories the daemons filled: the
# database, the catalog copy, fetched weights and the hooks' job records.
# rpm has no purge, so an erase keeps them, as it keeps edited configs.
set -e
case "$1" in
purge)
	rm -f /etc/llmgw/admin.token /etc/llmgw/node.token /etc/llmgw/agent.token
	# The resolved copy of agent.toml llmgw's hooks leave beside it for
	# llmgw-hook (nodeconf.ResolvedPath), and a temporary one an interrupted
	# write may have left: not package files either, and they would keep
	# /etc/llmgw from going.
	rm -f /etc/llmgw/.agent.toml.resolved.json /etc/llmgw/.agent.toml.resolved.json.tmp-*
	rmdir /etc/llmgw 2>/dev/null || true
	rm -rf /var/lib/llmgw /var/cache/llmgw /run/llmgw
	;;
esac
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
