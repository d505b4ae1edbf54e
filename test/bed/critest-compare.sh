#!/usr/bin/env bash
# critest-compare.sh DIRECT_LOG CRIMUX_LOG: exit 1 (listing them) if a spec
# fails through crimux that did not fail directly, or if fewer specs passed.
# The failed specs are read from ginkgo's closing "Summarizing N Failures"
# section, which is the same whether critest ran serially or with
# --parallel (the ginkgo CLI gathers every process's failures there).
set -euo pipefail
fails() { sed -n '/^Summarizing [0-9]* Failure/,$p' "$1" | grep -E '^\s*\[FAIL\]' | sed -E 's/\s+/ /g; s/ \S+:[0-9]+$//' | sort -u; }
new=$(comm -13 <(fails "$1") <(fails "$2") || true)
if [ -n "$new" ]; then
	echo "specs failing through crimux but not directly:"
	echo "$new"
	exit 1
fi
d=$(grep -oE '[0-9]+ passed' "${1%.log}.summary" | grep -oE '[0-9]+')
c=$(grep -oE '[0-9]+ passed' "${2%.log}.summary" | grep -oE '[0-9]+')
if [ "${c:-0}" -lt "${d:-0}" ]; then
	echo "fewer specs passed through crimux ($c) than directly ($d)"
	exit 1
fi
