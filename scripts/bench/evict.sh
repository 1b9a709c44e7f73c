#!/bin/sh
# evict.sh: replay 10,000 jobs against 64 node caches in 4 fabrics, with
# plain LRU and with llmgw's eviction (weights/evict.Plan, the code the
# agent runs), and print the two side by side: origin bytes, warm starts,
# evictions of a file in use and of a fabric's last copy of a recently used
# model. One row per cache size (10%, 20%, 40% of the catalog's bytes per
# node).
#
# Goals (issue 27): origin bytes ≤ 0.7× plain LRU's at 20% and no row
# worse; warm starts ≥ LRU's; no eviction of a file in use; no eviction of
# a fabric's last copy of a model used within keep_last_copy_for. The
# program exits 1 and says MISSED when a row misses one.
#
# Usage: scripts/bench/evict.sh [-seed N] [-jobs N] [-keep-last-copy-for D] [-shares 10,20,40]
#   (from the repository root; the default seed is 27)
set -eu
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
exec go run ./scripts/bench/evict "$@"
