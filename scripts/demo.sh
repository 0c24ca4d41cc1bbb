#!/usr/bin/env bash
# make demo: a daemon on a temporary root, a session mounted, captured,
# forked and compared. Needs root and /dev/fuse.
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin/homefs}

if [ "$(id -u)" -ne 0 ]; then echo "demo: run as root (FUSE mounts)" >&2; exit 1; fi
if [ ! -e /dev/fuse ]; then echo "demo: /dev/fuse is missing" >&2; exit 1; fi

"$GO" build -o "$BIN" ./cmd/homefs
BIN=$(realpath "$BIN")

WORK=$(mktemp -d /tmp/homefs-demo.XXXXXX)
export HOMEFS_ROOT=$WORK/root
SRC=$WORK/agent-1
FORK=$WORK/agent-1-retry
mkdir -p "$SRC" "$FORK"
DAEMON_PID=

cleanup() {
	set +e
	for d in "$FORK" "$SRC"; do
		mountpoint -q "$d" && "$BIN" unmount "$d" >/dev/null 2>&1
	done
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID"
		wait "$DAEMON_PID"
	fi
	for d in "$FORK" "$SRC"; do
		mountpoint -q "$d" && umount -l "$d"
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "start the daemon on $HOMEFS_ROOT"
"$BIN" serve --log-level warn &
DAEMON_PID=$!
for _ in $(seq 100); do
	[ -S "$HOMEFS_ROOT/homefs.sock" ] && break
	sleep 0.1
done
"$BIN" session list >/dev/null

step "create and mount session agent-1"
"$BIN" session create agent-1
"$BIN" mount agent-1 "$SRC"

step "an agent writes its rollout and a workspace file"
ROLL=codex-home/sessions/2025/06/01/rollout-2025-06-01T10-00-00-0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl
mkdir -p "$SRC/$(dirname "$ROLL")" "$SRC/workspace"
cat >"$SRC/$ROLL" <<'JSONL'
{"timestamp":"2025-06-01T10:00:00.000Z","ordinal":0,"type":"session_meta","payload":{"id":"0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","cwd":"/work","cli_version":"0.169.0","source":"exec","model_provider":"openai"}}
{"timestamp":"2025-06-01T10:00:01.000Z","ordinal":1,"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"add a README"}]}}
JSONL
echo "# demo project" >"$SRC/workspace/README.md"
(cd "$SRC" && find . -type f | sort)

step "capture agent-1"
SNAP=$("$BIN" capture agent-1 -m "after turn 1" --handle codex=0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b@1)
echo "snapshot $SNAP"

step "fork agent-1 at that snapshot into agent-1-retry and mount it"
"$BIN" fork "agent-1@$SNAP" agent-1-retry
"$BIN" mount agent-1-retry "$FORK"

step "the fork takes another turn; the source does not"
echo '{"timestamp":"2025-06-01T10:05:00.000Z","ordinal":2,"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"README added"}]}}' >>"$FORK/$ROLL"
echo "retry notes" >"$FORK/workspace/NOTES.md"
"$BIN" capture agent-1-retry -m "retry turn 2" >/dev/null
echo "source rollout: $(wc -l <"$SRC/$ROLL") lines; fork rollout: $(wc -l <"$FORK/$ROLL") lines"

step "diff agent-1 agent-1-retry"
"$BIN" diff agent-1 agent-1-retry

step "log agent-1-retry (lineage across the fork)"
"$BIN" log agent-1-retry

step "session list"
"$BIN" session list

step "stats"
"$BIN" stats

step "shut down: unmount, stop the daemon (it flushes and closes the store)"
"$BIN" unmount "$FORK"
"$BIN" unmount "$SRC"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID"
DAEMON_PID=
echo "done"
