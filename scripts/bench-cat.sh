#!/usr/bin/env bash
# As root: dd 1 GiB + fsync, then cat at once, cat again, cat after 7 s (past a
# periodic flush), then cold after a daemon restart; ext4 alongside.
set -euo pipefail
cd "$(dirname "$0")/.."; B=$PWD/bin/homefs; [ -x "$B" ] && [ -x "$PWD/bin/homefsd" ] || make build >/dev/null
R=$(mktemp -d /var/tmp/clib.XXXX); M=$R/mnt; N=$R/native; mkdir -p $M $N
export HOMEFS_ROOT=$R/root
t() { local s=$(date +%s.%N); "$@"; local e=$(date +%s.%N); echo "$(echo "scale=2; 1024/($e-$s)" | bc) MB/s"; }
catf() { cat "$1" >/dev/null; }
start() { $B serve > $R/log 2>&1 & echo $! > $R/pid; for i in $(seq 100); do $B status >/dev/null 2>&1 && return; sleep 0.1; done; }
start
$B session create s >/dev/null; $B mount s $M >/dev/null
for d in $N $M; do
  echo "== $d"
  dd if=/dev/urandom of=$d/big bs=1M count=1024 conv=fsync status=none
  echo -n "first cat: "; t catf $d/big
  echo -n "second cat: "; t catf $d/big
  sleep 7
  echo -n "cat after 7 s: "; t catf $d/big
done
$B unmount $M >/dev/null 2>&1 || umount $M; kill $(cat $R/pid); wait || true
sync; echo 3 > /proc/sys/vm/drop_caches
start; $B mount s $M >/dev/null
echo -n "homefs cold (restarted daemon, drop_caches): "; t catf $M/big
echo -n "ext4 cold: "; t catf $N/big
$B unmount $M >/dev/null 2>&1 || umount $M; kill $(cat $R/pid); wait || true
rm -rf $R
