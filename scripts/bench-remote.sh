#!/bin/sh
# Remote-tier benchmarks (internal/remote/bench_test.go) against
# a versitygw started on 127.0.0.1: push and lazy-read throughput, time to
# first byte of a rollout mounted from the remote against a whole-object
# download of the same bytes, bytes uploaded by a second push after a
# one-line change; each against a plain and an encrypted remote.
# Figures: docs/BENCHMARKS.md.
#
#   HOMEFS_BENCH_SCALE=small  a 64 MiB rollout instead of 1 GiB
#   HOMEFS_VERSITYGW=PATH     the gateway (default: built by
#                             scripts/install-versitygw.sh)
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
HOMEFS_VERSITYGW=${HOMEFS_VERSITYGW:-$(scripts/install-versitygw.sh)}
export HOMEFS_VERSITYGW
$GO test ./internal/remote -run '^$' -bench "${BENCH:-.}" -benchtime "${BENCHTIME:-1x}" \
	-count "${BENCHCOUNT:-1}" -timeout 60m
