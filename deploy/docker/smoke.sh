#!/usr/bin/env bash
# Checks the images build.sh made, for real:
#  - homefs: the daemon in a privileged container makes a mount that the
#    host sees through a shared bind mount; a file written on the host is
#    captured, forked and read back in the fork; docker stop unmounts
#    cleanly (exit 0, no mount left) and a new container serves the same
#    store.
#  - homefs-test: lint and a slice of the suite inside the container, on
#    this checkout: FUSE mounts, a loop-disk test, the S3 server and an
#    agent CLI. HOMEFS_SMOKE_FULL=1 runs the whole of .ci/run instead.
# As root, with a running Docker engine.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d /tmp/homefs-smoke.XXXXXX)
name=homefs-smoke-$$
cleanup() {
	docker rm -f "$name" >/dev/null 2>&1 || true
	for m in "$dir"/sessions/*; do umount -l "$m" 2>/dev/null || true; done
	umount -l "$dir/sessions" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

# Mounts made in the container reach the host only through a bind mount
# with shared propagation, whose source must be a shared mount itself.
mkdir -p "$dir/sessions" "$dir/store"
mount --bind "$dir/sessions" "$dir/sessions"
mount --make-rshared "$dir/sessions"

# --privileged asks runc for every capability. An engine that itself runs
# without some of them (a sandbox whose bounding set lacks one) cannot grant
# that and refuses the container ("unable to apply caps"); such a host gets
# every capability it has, the host's /dev and no seccomp or AppArmor
# filter instead, which is what the mounts and loop disks need.
priv=(--privileged)
if ! docker run --rm "${priv[@]}" --entrypoint true homefs >/dev/null 2>&1; then
	missing=()
	bnd=$((16#$(awk '/^CapBnd/ {print $2}' /proc/self/status)))
	for bit in $(seq 0 40); do
		if (( !(bnd >> bit & 1) )); then
			missing+=(--cap-drop "$(capsh --decode="$(printf 0x%x $((1 << bit)))" | sed 's/.*=cap_//')")
		fi
	done
	priv=(--cap-add ALL "${missing[@]}" --security-opt seccomp=unconfined
		--security-opt apparmor=unconfined --device-cgroup-rule 'a *:* rwm'
		-v /dev:/dev)
	echo "smoke: this engine cannot run --privileged; using ${priv[*]}"
fi

start() {
	docker run -d --name "$name" "${priv[@]}" --device /dev/fuse \
		-v "$dir/store:/var/lib/homefs" \
		-v "$dir/sessions:/srv/sessions:rshared" homefs >/dev/null
	for _ in $(seq 100); do
		docker exec "$name" homefs status >/dev/null 2>&1 && return
		sleep 0.1
	done
	docker logs "$name"
	echo "smoke: the daemon never answered" >&2
	exit 1
}
hx() { docker exec "$name" homefs "$@"; }
stop() {
	docker stop -t 90 "$name" >/dev/null
	code=$(docker inspect -f '{{.State.ExitCode}}' "$name")
	if [ "$code" != 0 ]; then
		docker logs "$name" | tail -20
		echo "smoke: the daemon exited $code on docker stop" >&2
		exit 1
	fi
	docker rm "$name" >/dev/null
	for m in s t; do
		if mountpoint -q "$dir/sessions/$m"; then
			echo "smoke: $m still mounted after docker stop" >&2
			exit 1
		fi
	done
}

echo "== homefs: daemon image"
start
hx --version
hx session create s
mkdir -p "$dir/sessions/s" "$dir/sessions/t"
hx mount s /srv/sessions/s
mountpoint -q "$dir/sessions/s"
echo "written on the host" >"$dir/sessions/s/f"
hx capture s
hx fork s t
hx mount t /srv/sessions/t
[ "$(cat "$dir/sessions/t/f")" = "written on the host" ]
stop
start
hx mount s /srv/sessions/s
[ "$(cat "$dir/sessions/s/f")" = "written on the host" ]
hx fsck
stop
echo "homefs image: ok"

echo "== homefs-test: test image"
run=(docker run --rm "${priv[@]}" --device /dev/fuse -v "$PWD:/src" -w /src homefs-test)
if [ "${HOMEFS_SMOKE_FULL:-}" = 1 ]; then
	"${run[@]}"
else
	"${run[@]}" bash -c 'source .ci/install && chmod 0666 /dev/fuse && make lint &&
		go test -count=1 -run "^(TestStatus|TestDiskFull|TestRemoteTwoHosts)$" ./cmd/homefs &&
		go test -count=1 -run "^TestCodexBindResume$" ./fork'
fi
echo "homefs-test image: ok"
