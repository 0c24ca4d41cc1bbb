#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (default 10s).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
status=0
while IFS= read -r line; do
	file=${line%%:*}
	name=$(sed -E 's/.*func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$line")
	pkg=./$(dirname "$file")
	echo "== $pkg $name ($fuzztime)"
	go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg" || status=1
done < <(git ls-files '*_test.go' | xargs grep -H '^func Fuzz' || true)
exit $status
