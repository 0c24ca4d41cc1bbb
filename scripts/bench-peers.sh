#!/bin/sh
# Side by side (internal/benchpeers): ext4 on a loop device, kernel
# overlayfs, fuse-overlayfs and homefs (io_uring and /dev/fuse) in one
# run, the same workloads on each, then capture and fork through the CLI
# and through the daemon's socket (ten rounds each) against btrfs
# snapshots. Prints the table; writes peers.json, peers.md
# and peers.svg to BENCH_PEERS_OUT. As root. Figures: docs/BENCHMARKS.md.
#
#   HOMEFS_BENCH_SCALE=small  64 MiB instead of 1 GiB (about a minute)
#   BENCHCOUNT=N              rounds of the workloads (default 2)
#   BENCH_PEERS_OUT=DIR       default .bench/peers
#
# Optional peers (Debian: apt-get install fuse-overlayfs btrfs-progs) are
# skipped with a message when absent.
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
if [ "$(id -u)" -ne 0 ]; then
	echo "bench-peers: run as root (it mounts loop devices and filesystems)" >&2
	exit 1
fi
${MAKE:-make} --no-print-directory build GO="$GO" >/dev/null
exec $GO run ./internal/benchpeers -homefs bin/homefs
