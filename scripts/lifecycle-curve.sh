#!/usr/bin/env bash
# Snapshot lifecycle curve (docs/BENCHMARKS.md, "Snapshot lifecycle"), as
# root with /dev/fuse, through homefs serve and the CLI:
#
#   forget  a session of 100 files of 1 MiB from /dev/urandom (workspace/)
#           and a rollout (codex-home/rollout.jsonl); each turn appends a
#           line of about 64 KiB of fresh base64 text to the rollout,
#           rewrites one workspace file with fresh random bytes and
#           captures; every 100 captures forget --keep-last 10 and gc.
#           Recorded before and after: du of the daemon's root (apparent and
#           allocated) and homefs stats (after gc, its stored bytes are what
#           the kept snapshots and the head reach).
#   keep    the same without forget and gc.
#   remote  the forget run with capture --push after every capture to a
#           Versity S3 Gateway bucket, while two more daemons (roots of
#           their own) push sessions of their own to it in a loop; every
#           100 captures forget --remote --keep-last 10 for each session,
#           then gc --remote while those two keep pushing. Recorded (with
#           the two pushers paused): the bucket's object bytes and disk
#           space against what the remote's kept records reach (homefs
#           remote sessions).
#
# Output: CSV files and a Markdown summary in LIFECYCLE_OUT (default
# .bench/lifecycle). Env:
#   LIFECYCLE_RUNS     runs, in order (default "forget keep remote")
#   LIFECYCLE_TURNS    captures per run (default 1000)
#   LIFECYCLE_EVERY    captures between forgets and records (default 100)
#   LIFECYCLE_KEEP     forget --keep-last N (default 10)
#   LIFECYCLE_FILES    workspace files of 1 MiB (default 100)
#   LIFECYCLE_OTHER_FILES  the two other hosts' workspace files (default 10)
#   LIFECYCLE_PUSH_GAP seconds each other host waits between pushes (default 1)
#   LIFECYCLE_DIR      where the roots live (default /var/tmp; not tmpfs)
#   LIFECYCLE_KEEP_DIR=1  keep the roots afterwards
#   HOMEFS_VERSITYGW   the gateway (default: scripts/install-versitygw.sh)
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
RUNS=${LIFECYCLE_RUNS:-forget keep remote}
TURNS=${LIFECYCLE_TURNS:-1000}
EVERY=${LIFECYCLE_EVERY:-100}
KEEP=${LIFECYCLE_KEEP:-10}
FILES=${LIFECYCLE_FILES:-100}
OTHER_FILES=${LIFECYCLE_OTHER_FILES:-10}
PUSH_GAP=${LIFECYCLE_PUSH_GAP:-1}
OUT=${LIFECYCLE_OUT:-.bench/lifecycle}
MiB=$((1 << 20))

if [ "$(id -u)" -ne 0 ]; then echo "lifecycle-curve: run as root (FUSE mounts)" >&2; exit 1; fi
"$GO" build -o bin/ ./cmd/homefs ./cmd/homefsd # homefs serve runs homefsd
B=$(realpath bin/homefs)
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
W=$(mktemp -d "${LIFECYCLE_DIR:-/var/tmp}/homefs-lifecycle.XXXXXX")
DAEMONS=() # pids of the daemons started here
MOUNTS=()  # "root mountpoint" of each mount made here
PUSHERS=() # pids of the other hosts' push loops
GW=        # pid of the gateway

cleanup() {
	set +e
	touch "$W/stop"
	for p in "${PUSHERS[@]}"; do wait "$p"; done
	for m in "${MOUNTS[@]}"; do
		read -r root dir <<<"$m"
		mountpoint -q "$dir" && HOMEFS_ROOT=$root "$B" unmount "$dir" >/dev/null 2>&1
	done
	for p in "${DAEMONS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p"; done
	for m in "${MOUNTS[@]}"; do
		read -r _ dir <<<"$m"
		mountpoint -q "$dir" && umount -l "$dir"
	done
	[ -n "$GW" ] && kill "$GW" 2>/dev/null && wait "$GW"
	if [ "${LIFECYCLE_KEEP_DIR:-}" = 1 ]; then echo "roots kept in $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT

hf() { # hf ROOT ARGS…: the CLI against the daemon on ROOT
	local root=$1
	shift
	HOMEFS_ROOT=$root "$B" "$@"
}
quiet() { # quiet CMD…: CMD's output only if it fails
	local out
	out=$("$@" 2>&1) || { local rc=$?; echo "$out" >&2; return $rc; }
}
apparent() { du -sb "$1" | cut -f1; }
allocated() { du -s --block-size=1 "$1" | cut -f1; }
jnum() { grep -o "\"$1\": *[0-9]*" | head -1 | sed 's/.*: *//'; }       # first KEY in JSON on stdin
jsum() { grep -o "\"$1\": *[0-9]*" | sed 's/.*: *//' | paste -sd+ | bc; } # sum of every KEY

# start ROOT [ENV=V…]: a daemon on ROOT, in the background, until it answers.
start() {
	local root=$1
	shift
	mkdir -p "$root"
	env "$@" HOMEFS_ROOT="$root" "$B" serve --log-level warn >"$root.log" 2>&1 &
	DAEMONS+=($!)
	for _ in $(seq 200); do
		hf "$root" status --no-remote-check >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "lifecycle-curve: the daemon on $root did not start:" >&2
	cat "$root.log" >&2
	exit 1
}

# session ROOT NAME MNT NFILES: NAME with NFILES random 1 MiB workspace
# files and a one-line rollout, mounted at MNT.
session() {
	local root=$1 name=$2 mnt=$3 n=$4 i
	mkdir -p "$mnt"
	hf "$root" session create "$name" >/dev/null
	hf "$root" mount "$name" "$mnt" >/dev/null
	MOUNTS+=("$root $mnt")
	mkdir -p "$mnt/workspace" "$mnt/codex-home"
	for i in $(seq 0 $((n - 1))); do head -c $MiB /dev/urandom >"$mnt/workspace/f$i"; done
	echo '{"type":"session_meta"}' >"$mnt/codex-home/rollout.jsonl"
}

# turn MNT T NFILES: one turn's writes. The file is picked by $RANDOM,
# seeded per run, so a run rewrites the same files in the same order.
turn() {
	local mnt=$1 t=$2 n=$3
	printf '{"turn":%d,"text":"%s"}\n' "$t" "$(head -c 49128 /dev/urandom | base64 -w0)" \
		>>"$mnt/codex-home/rollout.jsonl"
	head -c $MiB /dev/urandom >"$mnt/workspace/f$((RANDOM % n))"
}

# record RUN T POINT ROOT MNT EMPTY: one row of local.csv.
record() {
	local run=$1 t=$2 point=$3 root=$4 mnt=$5 empty=$6 stats
	stats=$(hf "$root" stats --json)
	local snaps stored roll written
	snaps=$(jnum snapshots <<<"$stats")
	stored=$(jnum stored_bytes <<<"$stats")
	roll=$(stat -c %s "$mnt/codex-home/rollout.jsonl")
	# What the snapshots present reach of the bytes written: the workspace
	# now, each older snapshot's one rewritten file, the rollout.
	written=$(((FILES + snaps - 1) * MiB + roll))
	echo "$run,$t,$point,$snaps,$(apparent "$root"),$(allocated "$root"),$stored,$written,$empty" >>"$OUT/local.csv"
}

# finish: unmount what the run mounted, stop its daemons and gateway, and
# remove its roots.
finish() {
	local m p root dir
	for m in "${MOUNTS[@]}"; do
		read -r root dir <<<"$m"
		hf "$root" unmount "$dir" >/dev/null
	done
	for p in "${DAEMONS[@]}"; do
		kill -TERM "$p"
		wait "$p" || echo "lifecycle-curve: daemon $p exited with status $?" >&2
	done
	if [ -n "$GW" ]; then
		kill "$GW"
		wait "$GW" || true # it dies of the signal
	fi
	MOUNTS=() DAEMONS=() GW=
	[ "${LIFECYCLE_KEEP_DIR:-}" = 1 ] || rm -rf "${W:?}"/*
}

local_run() {
	local run=$1 root=$W/$1/root mnt=$W/$1/mnt empty start_s t
	start_s=$(date +%s)
	start "$root"
	empty=$(allocated "$root")
	echo "$run,0,empty,0,$(apparent "$root"),$empty,0,0,$empty" >>"$OUT/local.csv"
	session "$root" s "$mnt" "$FILES"
	RANDOM=1
	for t in $(seq 1 "$TURNS"); do
		turn "$mnt" "$t" "$FILES"
		hf "$root" capture s >/dev/null
		[ $((t % EVERY)) -eq 0 ] || continue
		record "$run" "$t" before "$root" "$mnt" "$empty"
		if [ "$run" = forget ]; then
			hf "$root" forget --session s --keep-last "$KEEP" >/dev/null
			hf "$root" gc >/dev/null
			record "$run" "$t" after "$root" "$mnt" "$empty"
		fi
		echo "$run: $t captures, $(tail -1 "$OUT/local.csv")" >&2
	done
	echo "$run,$(($(date +%s) - start_s))" >>"$OUT/seconds.csv"
}

# gateway: a Versity S3 Gateway (posix backend, sidecar metadata) on
# 127.0.0.1 with bucket homefs-lifecycle; sets ENDPOINT.
gateway() {
	local vgw=${HOMEFS_VERSITYGW:-$(scripts/install-versitygw.sh)} port
	mkdir -p "$W/s3/data" "$W/s3/meta"
	port=$((20000 + $$ % 20000))
	while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
	ENDPOINT=http://127.0.0.1:$port
	ROOT_ACCESS_KEY_ID=homefs-bench ROOT_SECRET_ACCESS_KEY=homefs-bench-secret \
		"$vgw" --port "127.0.0.1:$port" --quiet --keep-alive posix --sidecar "$W/s3/meta" "$W/s3/data" \
		>"$W/s3/log" 2>&1 &
	GW=$!
	for _ in $(seq 150); do curl -s -o /dev/null "$ENDPOINT/" && break; sleep 0.1; done
	# CreateBucket, signed (SigV4 wants the body's hash: an empty one).
	curl -sf --aws-sigv4 aws:amz:us-east-1:s3 -u homefs-bench:homefs-bench-secret -X PUT \
		-H "x-amz-content-sha256: $(sha256sum </dev/null | cut -d' ' -f1)" \
		"$ENDPOINT/homefs-lifecycle" >/dev/null
}

CREDS=(AWS_ACCESS_KEY_ID=homefs-bench AWS_SECRET_ACCESS_KEY=homefs-bench-secret AWS_REGION=us-east-1)

# pusher I: another host's loop: a turn on its session o$I, capture --push,
# a pause; holds still while $W/pause exists (it says so in $W/paused.I).
pusher() {
	local i=$1 root=$W/remote/host$1 n=0 fails=0 err
	RANDOM=$((100 + i))
	while [ ! -e "$W/stop" ]; do
		if [ -e "$W/pause" ]; then
			touch "$W/paused.$i"
			while [ -e "$W/pause" ] && [ ! -e "$W/stop" ]; do sleep 0.1; done
			continue
		fi
		n=$((n + 1))
		turn "$root.mnt" "$n" "$OTHER_FILES"
		if ! err=$(hf "$root" capture "o$i" --push origin 2>&1 >/dev/null); then
			fails=$((fails + 1))
			echo "host$i turn $n: $err" >>"$W/push-errors"
		fi
		echo "$n $fails" >"$W/pushes.$i"
		sleep "$PUSH_GAP"
	done
}

# hold: pause both pushers and wait until each is between pushes.
hold() {
	local p
	touch "$W/pause"
	while [ ! -e "$W/paused.1" ] || [ ! -e "$W/paused.2" ]; do
		for p in "${PUSHERS[@]}"; do
			kill -0 "$p" 2>/dev/null && continue
			echo "lifecycle-curve: a pusher ended; its errors:" >&2
			cat "$W/push-errors" >&2
			exit 1
		done
		sleep 0.1
	done
}
release() { rm -f "$W/paused.1" "$W/paused.2" "$W/pause"; }

# remote_record T POINT ROOT GCJSON: one row of remote.csv (pushers held).
remote_record() {
	local t=$1 point=$2 root=$3 gc=$4 sessions objects
	sessions=$(hf "$root" remote sessions origin --json)
	objects=$(find "$W/s3/data/homefs-lifecycle" -type f -printf '%s\n' | paste -sd+ | bc)
	echo "$t,$point,$(jsum snapshots <<<"$sessions"),${objects:-0},$(allocated "$W/s3/data"),$(allocated "$W/s3/meta"),$(jsum bytes <<<"$sessions"),$(jnum kept_bytes <<<"$gc"),$(jnum waited_pushes <<<"$gc"),$(jnum deleted_bytes <<<"$gc"),$(cut -d' ' -f1 "$W/pushes.1") $(cut -d' ' -f1 "$W/pushes.2"),$(cut -d' ' -f2 "$W/pushes.1") $(cut -d' ' -f2 "$W/pushes.2")" >>"$OUT/remote.csv"
}

remote_checkpoint() {
	local t=$1 root=$2 gc s
	hold
	remote_record "$t" before "$root" "{}"
	release
	hf "$root" forget --session s --keep-last "$KEEP" >/dev/null
	hf "$root" gc >/dev/null
	for s in s o1 o2; do hf "$root" forget --remote origin --session "$s" --keep-last "$KEEP" >/dev/null; done
	gc=$(hf "$root" gc --remote origin --json) # the other hosts push meanwhile
	hold
	remote_record "$t" after "$root" "$gc"
	release
	echo "remote: $t captures, $(tail -1 "$OUT/remote.csv")" >&2
}

remote_run() {
	local root=$W/remote/host0 start_s i t
	start_s=$(date +%s)
	gateway
	for i in 0 1 2; do
		start "$W/remote/host$i" "${CREDS[@]}"
		hf "$W/remote/host$i" remote add origin s3://homefs-lifecycle/fleet --endpoint "$ENDPOINT" >/dev/null
	done
	session "$root" s "$root.mnt" "$FILES"
	for i in 1 2; do
		session "$W/remote/host$i" "o$i" "$W/remote/host$i.mnt" "$OTHER_FILES"
		echo "0 0" >"$W/pushes.$i"
		pusher "$i" &
		PUSHERS+=($!)
	done
	RANDOM=1
	for t in $(seq 1 "$TURNS"); do
		turn "$root.mnt" "$t" "$FILES"
		quiet hf "$root" capture s --push origin
		[ $((t % EVERY)) -eq 0 ] && remote_checkpoint "$t" "$root"
	done
	touch "$W/stop"
	for p in "${PUSHERS[@]}"; do wait "$p"; done
	PUSHERS=()
	if [ -e "$W/push-errors" ]; then cp "$W/push-errors" "$OUT/remote-push-errors.txt"; fi
	echo "remote,$(($(date +%s) - start_s))" >>"$OUT/seconds.csv"
}

# report: the Markdown tables of local.csv and remote.csv.
report() {
	{
		echo "turns=$TURNS every=$EVERY keep=$KEEP files=$FILES other_files=$OTHER_FILES"
		echo
		[ "$(wc -l <"$OUT/local.csv")" -gt 1 ] && local_table
		[ "$(wc -l <"$OUT/remote.csv")" -gt 1 ] && remote_table
		echo "seconds per run: $(tr '\n' ' ' <"$OUT/seconds.csv")"
	} >"$OUT/lifecycle.md"
	cat "$OUT/lifecycle.md"
}

local_table() {
	echo "| after capture | forget: du before | du after (apparent) | du after | kept reach (stored) | written data kept | empty store | du after / (kept + empty) | keep: du | keep: stored |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -F, -v M=$MiB '
		NR == 1 { next }
		$3 == "empty" { e[$1] = $6 }
		$3 == "before" { if (!seen[$2]++) turns[++n] = $2; b[$1, $2] = $6; st[$1, $2] = $7 }
		$3 == "after" { aa[$2] = $5; a[$2] = $6; ka[$2] = $7; wr[$2] = $8 }
		function f(v) { return v == "" ? "—" : sprintf("%.1f MiB", v / M) }
		END {
			for (i = 1; i <= n; i++) {
				t = turns[i]
				r = (a[t] != "") ? sprintf("%.2f×", a[t] / (ka[t] + e["forget"])) : "—"
				printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t, f(b["forget", t]),
					f(aa[t]), f(a[t]), f(ka[t]), f(wr[t]), f(e["forget"]), r, f(b["keep", t]), f(st["keep", t])
			}
		}' "$OUT/local.csv"
	echo
}

remote_table() {
	echo "| after capture | bucket before forget | bucket after gc --remote | on disk (data + sidecar) | kept records | kept reach | gc kept | bucket / reach | on disk / reach | other hosts' pushes (failed) |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -F, -v M=$MiB '
		NR == 1 { next }
		$2 == "before" { b[$1] = $4 }
		$2 == "after" {
			printf "| %d | %.1f MiB | %.1f MiB | %.1f MiB | %d | %.1f MiB | %.1f MiB | %.2f× | %.2f× | %s (%s) |\n",
				$1, b[$1] / M, $4 / M, ($5 + $6) / M, $3, $7 / M, $8 / M, $4 / $7, ($5 + $6) / $7, $11, $12
		}' "$OUT/remote.csv"
	echo
}

echo "run,turn,point,snapshots,apparent_bytes,allocated_bytes,stored_bytes,written_reach_bytes,empty_allocated_bytes" >"$OUT/local.csv"
echo "turn,point,records,bucket_object_bytes,bucket_allocated_bytes,sidecar_allocated_bytes,reach_bytes,gc_kept_bytes,gc_waited_pushes,gc_deleted_bytes,other_pushes,other_push_failures" >"$OUT/remote.csv"
: >"$OUT/seconds.csv"
for run in $RUNS; do
	case $run in
	forget | keep) local_run "$run" ;;
	remote) remote_run ;;
	*) echo "lifecycle-curve: unknown run $run (forget, keep, remote)" >&2; exit 2 ;;
	esac
	finish
done
report
