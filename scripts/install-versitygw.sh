#!/usr/bin/env bash
# Builds the Versity S3 Gateway that the remote tests (internal/remote) run
# against, once per machine: the binary is cached outside the clone, so a
# rerun prints its path without building. Prints the binary's path on stdout;
# export it as HOMEFS_VERSITYGW.
#
#   export HOMEFS_VERSITYGW=$(scripts/install-versitygw.sh)
#
# Env: VERSITYGW_VERSION (default v1.8.0), HOMEFS_CI_CACHE (default
# /var/cache/homefs-ci).
set -euo pipefail

version=${VERSITYGW_VERSION:-v1.8.0}
cache=${HOMEFS_CI_CACHE:-/var/cache/homefs-ci}
bindir="$cache/versitygw-$version/bin"
bin="$bindir/versitygw"

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bindir"
# Build outside any module so the project's go.mod is never touched.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(
	cd "$work"
	echo "building versitygw $version into $bindir (a few minutes)" >&2
	GOFLAGS= GOBIN="$bindir" go install "github.com/versity/versitygw/cmd/versitygw@$version" >&2
)
"$bin" --version >&2 || true
echo "$bin"
