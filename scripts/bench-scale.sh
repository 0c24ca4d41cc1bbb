#!/usr/bin/env bash
# Scale on one host: one daemon on a temporary root with N sessions
# mounted, each written (a few small files) and captured, then left idle;
# what the daemon holds per mount: open descriptors (/proc/PID/fd),
# threads (/proc/PID/status), memory mappings (/proc/PID/maps, which
# vm.max_map_count bounds), RSS and PSS (/proc/PID/smaps_rollup), each
# as the difference from the daemon with no mount, divided by N; and the
# time to capture all N (one `homefs capture` after another). Both
# transports: serve --fuse-uring=off (/dev/fuse) and =on (io_uring, where
# the kernel has it). Needs root and /dev/fuse.
#
#   SCALE_SIZES="200 1000"     how many sessions (one daemon per size;
#                              HOMEFS_BENCH_SCALE=small: 50)
#   SCALE_TRANSPORTS="off on"  the --fuse-uring values to run
#   SCALE_IDLE=25              seconds to wait after the captures before
#                              measuring: an idle session gives back its
#                              staging files and journal after 10 s
#   SCALE_JOBS=4               CLI commands run at once while setting up
#   HOMEFS_BENCH_DIR=DIR       where the roots and mountpoints go
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin/homefs}
if [ "${HOMEFS_BENCH_SCALE:-}" = small ]; then SIZES=${SCALE_SIZES:-50}; else SIZES=${SCALE_SIZES:-200 1000}; fi
TRANSPORTS=${SCALE_TRANSPORTS:-off on}
IDLE=${SCALE_IDLE:-25}
JOBS=${SCALE_JOBS:-4}

if [ "$(id -u)" -ne 0 ]; then echo "bench-scale: run as root (FUSE mounts)" >&2; exit 1; fi
if [ ! -e /dev/fuse ]; then echo "bench-scale: /dev/fuse is missing" >&2; exit 1; fi

# The unit's limit (deploy/homefs.service, LimitNOFILE): the daemon holds a
# few descriptors per mount, and the CLI, systemd and the host's defaults
# (often 1024 soft) must not be what the benchmark measures.
want_nofile=1048576
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$want_nofile" ]; then
	ulimit -Hn "$want_nofile" 2>/dev/null || true
fi
ulimit -Sn "$(ulimit -Hn)"
echo "bench-scale: ulimit -n $(ulimit -n), max_map_count $(cat /proc/sys/vm/max_map_count)," \
	"threads-max $(cat /proc/sys/kernel/threads-max), $(nproc) CPUs"

"$GO" build -o "$BIN" ./cmd/homefs
"$GO" build -o "$(dirname "$BIN")/homefsd" ./cmd/homefsd # homefs serve runs it
BIN=$(realpath "$BIN")

WORK=$(mktemp -d "${HOMEFS_BENCH_DIR:-${TMPDIR:-/tmp}}/homefs-scale.XXXXXX")
DAEMON_PID=
cleanup() {
	set +e
	stop_daemon
	rm -rf "$WORK"
}
trap cleanup EXIT

# stop_daemon unmounts what the daemon serves (SIGTERM) and lazily
# detaches whatever is left, so no mount outlives the run.
stop_daemon() {
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID"
		wait "$DAEMON_PID" 2>/dev/null
	fi
	DAEMON_PID=
	if [ -d "$WORK/mnt" ]; then
		awk -v d="$WORK/mnt/" 'index($2, d) == 1 {print $2}' /proc/mounts |
			while read -r m; do umount -l "$m"; done
	fi
}

# sample prints "fds threads maps rss_kb pss_kb" of the daemon.
sample() {
	local fds threads maps rss pss
	fds=$(find "/proc/$DAEMON_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
	maps=$(wc -l <"/proc/$DAEMON_PID/maps")
	threads=$(awk '/^Threads:/ {print $2}' "/proc/$DAEMON_PID/status")
	rss=$(awk '/^Rss:/ {print $2}' "/proc/$DAEMON_PID/smaps_rollup")
	pss=$(awk '/^Pss:/ {print $2}' "/proc/$DAEMON_PID/smaps_rollup")
	echo "$fds $threads $maps $rss $pss"
}

# setup_one creates, mounts and writes session $1 (run by xargs).
setup_one() {
	local i=$1 dir=$WORK/mnt/s$1
	mkdir -p "$dir"
	"$BIN" session create "s$i" >/dev/null
	"$BIN" mount "s$i" "$dir" >/dev/null
	mkdir "$dir/src"
	printf 'package main\n' >"$dir/src/main.go"
	printf '{"turn":%d}\n' "$i" >"$dir/rollout.jsonl"
	head -c 4096 /dev/urandom >"$dir/blob"
}
export -f setup_one
export BIN WORK

run_one() {
	local transport=$1 n=$2
	rm -rf "$WORK/root" "$WORK/mnt"
	mkdir -p "$WORK/mnt"
	export HOMEFS_ROOT=$WORK/root
	"$BIN" serve --fuse-uring="$transport" --log-level warn &
	DAEMON_PID=$!
	for _ in $(seq 200); do
		[ -S "$HOMEFS_ROOT/homefs.sock" ] && break
		sleep 0.1
	done
	"$BIN" session list >/dev/null
	local base
	base=$(sample)

	seq "$n" | xargs -P "$JOBS" -I{} bash -c 'setup_one {}'
	local t0 t1
	t0=$(date +%s.%N)
	for i in $(seq "$n"); do "$BIN" capture "s$i" >/dev/null; done
	t1=$(date +%s.%N)
	sleep "$IDLE"
	local idle mounted
	idle=$(sample)
	mounted=$(awk -v d="$WORK/mnt/" 'index($2, d) == 1' /proc/mounts | wc -l)
	if [ "$mounted" -ne "$n" ]; then
		echo "bench-scale: only $mounted of $n sessions mounted (see the errors above)" >&2
		echo "| $transport | $n | failed: $mounted mounted |" >>"$WORK/table"
		stop_daemon
		return
	fi
	echo "$transport $n $base $idle $t0 $t1" | awk '{
		n = $2
		printf "| %s | %d | %.1f | %.2f | %.1f | %.3f | %.3f | %d | %d | %.0f | %.2f |\n",
			($1 == "on" ? "io_uring" : "/dev/fuse"), n,
			($8 - $3) / n, ($9 - $4) / n, ($10 - $5) / n, ($11 - $6) / n / 1024, ($12 - $7) / n / 1024,
			$8, $9, $11 / 1024, $14 - $13
	}' >>"$WORK/table"
	tail -n 1 "$WORK/table"
	stop_daemon
}

for transport in $TRANSPORTS; do
	if [ "$transport" = on ] && [ ! -e /sys/module/fuse/parameters/enable_uring ]; then
		echo "bench-scale: this kernel has no FUSE over io_uring; skipping --fuse-uring=on"
		continue
	fi
	for n in $SIZES; do run_one "$transport" "$n"; done
done

echo
echo "| transport | mounts | fds/mount | threads/mount | maps/mount | RSS MB/mount | PSS MB/mount | fds | threads | RSS MB | capture all (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
cat "$WORK/table"
