#!/bin/sh
# Makes the sparse archives that TestImportRefusesSparse reads, with GNU
# tar: a 2 GiB file with 4 KiB of data at each end and a hole between,
# archived with --sparse in GNU's own format (type 'S') and in PAX with
# GNU's sparse formats 1.0 (tar's default), 0.1 and 0.0. The archives differ
# from run to run only in the names tar makes up from its pid.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
f=$tmp/holes
truncate -s 2G "$f"
head -c 4096 /dev/zero | tr '\0' a | dd of="$f" conv=notrunc status=none
head -c 4096 /dev/zero | tr '\0' z | dd of="$f" bs=4096 seek=$((2 * 1024 * 1024 / 4 - 1)) conv=notrunc status=none
touch -d @1700000000 "$f"
opts="-C $tmp --sparse --numeric-owner --owner=0 --group=0 --mode=0644 --mtime=@1700000000 -b 1"
pax="--pax-option=exthdr.name=PaxHeaders/%f,delete=atime,delete=ctime"
tar $opts --format=gnu -cf sparse-gnu.tar holes
tar $opts --format=posix "$pax" --sparse-version=1.0 -cf sparse-pax1.0.tar holes
tar $opts --format=posix "$pax" --sparse-version=0.1 -cf sparse-pax0.1.tar holes
tar $opts --format=posix "$pax" --sparse-version=0.0 -cf sparse-pax0.0.tar holes
