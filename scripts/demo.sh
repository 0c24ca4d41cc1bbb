#!/usr/bin/env bash
# make demo: a daemon on a temporary root; an agent, run as an ordinary
# user through homefs run, writes into a session that is captured, forked
# and compared. Needs root and /dev/fuse.
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin/homefs}

if [ "$(id -u)" -ne 0 ]; then echo "demo: run as root (FUSE mounts)" >&2; exit 1; fi
if [ ! -e /dev/fuse ]; then echo "demo: /dev/fuse is missing" >&2; exit 1; fi

"$GO" build -o "$BIN" ./cmd/homefs
"$GO" build -o "$(dirname "$BIN")/homefsd" ./cmd/homefsd # homefs serve runs it
BIN=$(realpath "$BIN")

WORK=$(mktemp -d /tmp/homefs-demo.XXXXXX)
chmod 755 "$WORK" # the agent user reaches the canonical paths below it
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

AGENT=nobody # the unprivileged user the agent runs as
CANON=$WORK/canon # where the session's parts belong (its canonical paths)

step "create session agent-1: its Codex home and workspace, owned by $AGENT"
"$BIN" session create agent-1 --owner "$AGENT" \
	--home codex=codex-home --home-at "codex=$CANON/agent/.codex" --workspace-at "$CANON/repo"
"$BIN" session list

step "the agent ($AGENT, through homefs run) writes its rollout and a workspace file"
ROLL=sessions/2025/06/01/rollout-2025-06-01T10-00-00-0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl
# An agent gets a clean environment: what it needs comes with --env.
"$BIN" run agent-1 --user "$AGENT" --env "ROLL=$ROLL" -- sh -ec '
	echo "I am $(id -un) in $PWD; CODEX_HOME=$CODEX_HOME"
	mkdir -p "$CODEX_HOME/$(dirname "$ROLL")"
	cat >"$CODEX_HOME/$ROLL" <<JSONL
{"timestamp":"2025-06-01T10:00:00.000Z","ordinal":0,"type":"session_meta","payload":{"id":"0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","cwd":"$PWD","cli_version":"0.169.0","source":"exec","model_provider":"openai"}}
{"timestamp":"2025-06-01T10:00:01.000Z","ordinal":1,"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"add a README"}]}}
JSONL
	echo "# demo project" >README.md'

step "the host sees the session through a daemon mount"
"$BIN" mount agent-1 "$SRC"
(cd "$SRC" && find . -type f | sort && ls -ln workspace)

step "capture agent-1"
SNAP=$("$BIN" capture agent-1 -m "after turn 1" --handle codex=0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b@1)
echo "snapshot $SNAP"

step "fork agent-1 at that snapshot into agent-1-retry (O(1); same canonical paths)"
"$BIN" fork "agent-1@$SNAP" agent-1-retry

step "the fork takes another turn at the same paths; the source does not"
"$BIN" run agent-1-retry --user "$AGENT" --env "ROLL=$ROLL" -- sh -ec '
	echo "{\"timestamp\":\"2025-06-01T10:05:00.000Z\",\"ordinal\":2,\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"README added\"}]}}" >>"$CODEX_HOME/$ROLL"
	echo "retry notes" >NOTES.md'
"$BIN" mount agent-1-retry "$FORK"
"$BIN" capture agent-1-retry -m "retry turn 2" >/dev/null
echo "source rollout: $(wc -l <"$SRC/codex-home/$ROLL") lines; fork rollout: $(wc -l <"$FORK/codex-home/$ROLL") lines"

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
