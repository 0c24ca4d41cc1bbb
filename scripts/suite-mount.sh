# Sourced by scripts/pjdfstest.sh and scripts/fsx.sh: a homefs daemon on a
# temporary root serving one session mounted at $MNT, over the transport
# given to mount_start, with an optional loop that captures the session
# every few seconds and forks it once while a suite runs. Needs bash, root
# and /dev/fuse; BIN is the homefs binary (built by the caller, with
# homefsd beside it), OUT the directory kept for logs (the daemon's,
# daemon-TRANSPORT.log).
#
#   SUITE_DIR      where the temporary roots go (default /var/tmp)
#   SUITE_EVERY    seconds between captures (default 3)

SUITE_WORK=
DAEMON_PID=
CAPTURE_PID=
MNT=

suite_init() { # suite_init NAME: checks, then the work dir and the exit trap
	local name=$1
	if [ "$(id -u)" -ne 0 ]; then echo "$name: run as root (FUSE mounts)" >&2; exit 1; fi
	if [ ! -e /dev/fuse ]; then echo "$name: /dev/fuse is missing" >&2; exit 1; fi
	SUITE_WORK=$(mktemp -d "${SUITE_DIR:-/var/tmp}/homefs-$name.XXXXXX")
	chmod 755 "$SUITE_WORK" # the suites' unprivileged users reach the mount below it
	trap suite_cleanup EXIT
	trap 'exit 130' INT TERM
}

hf() { "$BIN" --root "$SUITE_WORK/root" "$@"; }

# mount_start TRANSPORT (off|on): start a daemon with --fuse-uring=TRANSPORT,
# create session "suite" and mount it at $MNT (allow_other, as every mount
# without --private); fails unless the mount got the transport asked for.
mount_start() {
	local transport=$1 want=/dev/fuse
	[ "$transport" = on ] && want=io_uring
	rm -rf "$SUITE_WORK/root" "$SUITE_WORK/mnt"
	MNT=$SUITE_WORK/mnt
	mkdir -p "$MNT" "$SUITE_WORK/root"
	"$BIN" serve --root "$SUITE_WORK/root" --fuse-uring="$transport" --log-level warn \
		2>>"$OUT/daemon-$transport.log" &
	DAEMON_PID=$!
	local i
	for i in $(seq 200); do
		[ -S "$SUITE_WORK/root/homefs.sock" ] && break
		kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$OUT/daemon-$transport.log" >&2; return 1; }
		sleep 0.1
	done
	hf session create suite >/dev/null
	hf mount suite "$MNT"
	local got
	got=$(hf status | awk -v m="$MNT" '$1 == m { for (i = 2; i <= NF; i++) if ($i == "/dev/fuse" || $i == "io_uring") print $i }')
	if [ "$got" != "$want" ]; then
		echo "mount at $MNT: transport ${got:-unknown}, wanted $want" >&2
		hf status >&2
		return 1
	fi
	echo "daemon $DAEMON_PID on $SUITE_WORK/root, session suite at $MNT over $got"
}

mount_stop() { # unmount, stop the daemon; fails if either fails
	local rc=0
	if [ -n "$MNT" ] && mountpoint -q "$MNT"; then hf unmount "$MNT" >/dev/null || rc=1; fi
	if [ -n "$DAEMON_PID" ]; then
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" || rc=1
		DAEMON_PID=
	fi
	return $rc
}

# captures_start: capture session "suite" every SUITE_EVERY seconds until
# captures_stop; the second capture is also forked (to session
# "suite-fork"). Each outcome is a line in $SUITE_WORK/captures.
captures_start() {
	: >"$SUITE_WORK/captures"
	rm -f "$SUITE_WORK/captures.stop"
	(
		n=0
		while :; do
			sleep "${SUITE_EVERY:-3}"
			[ -e "$SUITE_WORK/captures.stop" ] && exit 0
			if snap=$(hf capture suite -m "capture $n" 2>>"$SUITE_WORK/captures.err"); then
				echo "capture ok $snap" >>"$SUITE_WORK/captures"
			else
				snap=
				echo "capture failed" >>"$SUITE_WORK/captures"
			fi
			n=$((n + 1))
			if [ "$n" = 2 ] && [ -n "${snap:-}" ]; then
				if hf fork "suite@$snap" suite-fork >/dev/null 2>>"$SUITE_WORK/captures.err"; then
					echo "fork ok $snap" >>"$SUITE_WORK/captures"
				else
					echo "fork failed" >>"$SUITE_WORK/captures"
				fi
			fi
		done
	) &
	CAPTURE_PID=$!
}

# captures_stop: end the loop (after the capture it is in, if any) and
# print "captures: N ok, M failed; fork: …"; fails if a capture or the
# fork failed, or no fork was made. Not in a pipeline: it waits for the
# loop, a child of this shell.
captures_stop() {
	[ -n "$CAPTURE_PID" ] || return 0
	touch "$SUITE_WORK/captures.stop"
	wait "$CAPTURE_PID"
	CAPTURE_PID=
	local ok failed fork
	ok=$(grep -c "^capture ok" "$SUITE_WORK/captures" || true)
	failed=$(grep -c "^capture failed" "$SUITE_WORK/captures" || true)
	fork=$(awk '$1 == "fork" { print $2 }' "$SUITE_WORK/captures")
	echo "captures: $ok ok, $failed failed; fork: ${fork:-none}"
	if [ -s "$SUITE_WORK/captures.err" ]; then sed 's/^/  /' "$SUITE_WORK/captures.err"; fi
	[ "$failed" = 0 ] && [ "$fork" = ok ]
}

suite_cleanup() {
	set +e
	cd / || true
	if [ -n "$CAPTURE_PID" ]; then touch "$SUITE_WORK/captures.stop" && wait "$CAPTURE_PID"; fi
	mount_stop
	[ -n "$MNT" ] && mountpoint -q "$MNT" && umount -l "$MNT"
	[ -n "$SUITE_WORK" ] && rm -rf "$SUITE_WORK"
}
