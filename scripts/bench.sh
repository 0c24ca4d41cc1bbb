#!/bin/sh
# Mount benchmarks: each operation on the native disk under the
# store and on a homefs mount, in the same run, then the ratio table
# (internal/benchreport) and, when benchstat can be fetched, its summary;
# then homefs side by side with ext4, overlayfs and fuse-overlayfs
# (scripts/bench-peers.sh).
#
#   HOMEFS_BENCH_SCALE=small  sizes for a smoke run (under 3 minutes)
#   HOMEFS_BENCH_DIR=DIR      where the store, native dir and mount live
#   BENCH=REGEXP              which benchmarks (default: all)
#   BENCHTIME, BENCHCOUNT     go test -benchtime / -count (default 1s, 1)
#   BENCH_OUT=FILE            keep the raw results (default: a temp file)
#   BENCH_PEERS=0             without the side-by-side run
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=${BENCH_OUT:-$(mktemp "${TMPDIR:-/tmp}/homefs-bench.XXXXXX")}

$GO test ./fusefs -run '^$' -bench "${BENCH:-.}" -benchtime "${BENCHTIME:-1s}" \
	-count "${BENCHCOUNT:-1}" -timeout 120m | tee "$out"
echo
$GO run ./internal/benchreport <"$out"
echo
# benchstat compares columns by a key=value name part: rename the targets.
if sed -E 's#/(native|homefs)(-[0-9]+)?([[:space:]])#/fs=\1\2\3#' "$out" >"$out.fs" &&
	$GO run golang.org/x/perf/cmd/benchstat@latest -col /fs "$out.fs" 2>/dev/null; then
	:
else
	echo "benchstat unavailable (it needs the network); raw results: $out"
fi
rm -f "$out.fs"
if [ "${BENCH_PEERS:-1}" != 0 ]; then
	echo
	scripts/bench-peers.sh
fi
