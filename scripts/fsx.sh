#!/usr/bin/env bash
# fsx (xfstests' ltp/fsx) on a homefs mount, as root, once per transport:
# a daemon on a temporary root, one session mounted, then every variant
# with every seed in turn, each on a file of its own in the mount. Prints
# one line per run (ops done, pass or fail), the operations fsx found
# unsupported, and a total. Results: docs/ARCHITECTURE.md, "Conformance".
#
# Collapse and insert range (-C -I) are always off: the kernel's FUSE
# fallocate refuses those modes before any daemon sees them. A probe run
# of one operation with every operation on shows what fsx finds refused.
#
#   FSX=PATH        a built fsx binary; required: this script neither
#                   fetches nor builds it
#   TRANSPORTS      serve --fuse-uring values (default "off on")
#   VARIANTS        which of the variants below (default all)
#   SEEDS           fsx -S values (default "1 2 3 4")
#   OPS             operations per run (default 100000)
#   CAPTURE=1       capture the session every 3 s and fork it once meanwhile
#   OUT=DIR         keep fsx's logs there (default a new /tmp dir)
#   BIN             the homefs binary, homefsd beside it (default: both
#                   built to bin/)
#
# Variants (fsx flags):
#   mmap     reads and writes through syscalls and shared mappings (default)
#   nommap   syscalls only (-R -W)
#   aio      reads and writes through libaio (-A)
#   direct   O_DIRECT, 4 KiB-aligned (-Z -R -W -r 4096 -w 4096 -t 4096)
#   flush    fsync and drop the page cache after every write (-f)
#   sync     fsync after every change (-y), reopen 1 op in 100 (-c 100)
#   eof      pollute past EOF on size changes (-e 1)
# Exit status 0 when every run passed.
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/suite-mount.sh
GO=${GO:-go}
: "${FSX:?set FSX to a built fsx binary (xfstests ltp/fsx)}"
FSX=$(realpath "$FSX")
[ -x "$FSX" ] || { echo "fsx: $FSX is not executable" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
	BIN=bin/homefs
	"$GO" build -o "$BIN" ./cmd/homefs
	"$GO" build -o "$(dirname "$BIN")/homefsd" ./cmd/homefsd # homefs serve runs it
fi
BIN=$(realpath "$BIN")
OUT=${OUT:-$(mktemp -d /tmp/homefs-fsx-logs.XXXXXX)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
suite_init fsx

declare -A FLAGS=(
	[mmap]=""
	[nommap]="-R -W"
	[aio]="-A"
	[direct]="-Z -R -W -r 4096 -w 4096 -t 4096"
	[flush]="-f"
	[sync]="-y -c 100"
	[eof]="-e 1"
)
VARIANTS=${VARIANTS:-mmap nommap aio direct flush sync eof}
for v in $VARIANTS; do
	[ -n "${FLAGS[$v]+x}" ] || { echo "fsx: unknown variant $v" >&2; exit 2; }
done
OPS=${OPS:-100000}
mode=plain
[ "${CAPTURE:-}" = 1 ] && mode=captured

run_one() { # run_one TRANSPORT VARIANT SEED: one fsx run, one result line
	local name=$1-$mode-$2-$3 rc=0
	# shellcheck disable=SC2086 # the flags are words
	"$FSX" -C -I -N "$OPS" -S "$3" -P "$OUT" ${FLAGS[$2]} "$MNT/$name" \
		>"$OUT/$name.log" 2>&1 || rc=$?
	if [ $rc -eq 0 ]; then
		echo "  $2 seed $3: $OPS ops passed"
	else
		echo "  $2 seed $3: FAILED (exit $rc): $(grep -m1 -iE 'error|fail|bad' "$OUT/$name.log" || true)"
	fi
	return $rc
}

rc=0
for transport in ${TRANSPORTS:-off on}; do
	echo "== fsx, --fuse-uring=$transport, $mode, $OPS ops per run"
	mount_start "$transport"
	if [ "$mode" = captured ]; then captures_start; fi
	"$FSX" -N 1 -P "$OUT" "$MNT/probe" >"$OUT/$transport-$mode-probe.log" 2>&1 || rc=1
	echo "  refused, as fsx's probe found: $(grep -h 'does not support.*disabling' "$OUT/$transport-$mode-probe.log" | sed -E 's/^main: filesystem does not support //; s/, disabling!//' | paste -sd ';' - || true)"
	pass=0 fail=0
	for v in $VARIANTS; do
		for s in ${SEEDS:-1 2 3 4}; do
			if run_one "$transport" "$v" "$s"; then pass=$((pass + 1)); else fail=$((fail + 1)); rc=1; fi
		done
	done
	if [ "$mode" = captured ]; then captures_stop || rc=1; fi
	mount_stop || { echo "fsx: unmount or daemon stop failed" >&2; rc=1; }
	echo "  runs: $pass passed, $fail failed"
done
echo "logs in $OUT"
exit $rc
