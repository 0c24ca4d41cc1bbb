#!/usr/bin/env bash
# pjdfstest (https://github.com/pjd/pjdfstest) on a homefs mount, as root,
# once per transport: a daemon on a temporary root, one session mounted
# (allow_other, default_permissions), `prove -rv $PJDFSTEST/tests` run with
# its working directory inside the mount. Prints, per transport, the files
# and subtests that passed and failed, and the failing files. Results and
# the command's use: docs/ARCHITECTURE.md, "Conformance".
#
#   PJDFSTEST=DIR      a built pjdfstest checkout (DIR/pjdfstest, DIR/tests);
#                      required: this script neither fetches nor builds it
#   TRANSPORTS         serve --fuse-uring values, in order (default "off on":
#                      /dev/fuse, then FUSE over io_uring)
#   CAPTURE=1          capture the session every 3 s and fork it once while
#                      the suite runs (SUITE_EVERY changes the interval)
#   TESTS="a b"        directories or files under $PJDFSTEST/tests (default all)
#   OUT=DIR            keep the prove logs there (default a new /tmp dir)
#   BIN                the homefs binary, homefsd beside it (default: both
#                      built to bin/)
# Exit status 0 when every file passed on every transport.
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/suite-mount.sh
GO=${GO:-go}
: "${PJDFSTEST:?set PJDFSTEST to a built pjdfstest checkout}"
PJDFSTEST=$(realpath "$PJDFSTEST")
if [ ! -x "$PJDFSTEST/pjdfstest" ] || [ ! -d "$PJDFSTEST/tests" ]; then
	echo "pjdfstest: $PJDFSTEST has no built pjdfstest binary and tests/" >&2
	exit 1
fi
command -v prove >/dev/null || { echo "pjdfstest: prove (perl) is missing" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
	BIN=bin/homefs
	"$GO" build -o "$BIN" ./cmd/homefs
	"$GO" build -o "$(dirname "$BIN")/homefsd" ./cmd/homefsd # homefs serve runs it
fi
BIN=$(realpath "$BIN")
OUT=${OUT:-$(mktemp -d /tmp/homefs-pjdfstest-logs.XXXXXX)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
suite_init pjdfstest

targets=()
for t in ${TESTS:-.}; do targets+=("$PJDFSTEST/tests/$t"); done
mode=plain
[ "${CAPTURE:-}" = 1 ] && mode=captured

summarise() { # summarise LOG: files and subtests passed and failed
	awk '
		/^Files=[0-9]+, Tests=[0-9]+/ { split($1, f, "="); split($2, t, "="); files = f[2] + 0; tests = t[2] + 0 }
		/^Failed [0-9]+\/[0-9]+ test programs/ { split($2, a, "/"); ffail = a[1] }
		/subtests failed/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\/[0-9]+$/) { split($i, a, "/"); tfail = a[1] } }
		END { printf "files %d/%d passed, subtests %d/%d passed\n", files - ffail, files, tests - tfail, tests }
	' "$1"
	grep -E '^/.*\.t \(Wstat' "$1" | sed -E 's#^.*/tests/#  failed: #' || true
}

rc=0
for transport in ${TRANSPORTS:-off on}; do
	log=$OUT/$transport-$mode.log
	echo "== pjdfstest, --fuse-uring=$transport, $mode: $log"
	mount_start "$transport"
	if [ "$mode" = captured ]; then captures_start; fi
	(cd "$MNT" && prove -rv "${targets[@]}") >"$log" 2>&1 || rc=1
	: >"$OUT/$transport-captures"
	if [ "$mode" = captured ]; then captures_stop >"$OUT/$transport-captures" || rc=1; fi
	mount_stop || { echo "pjdfstest: unmount or daemon stop failed" >&2; rc=1; }
	{ summarise "$log"; cat "$OUT/$transport-captures"; } | tee "$OUT/$transport-$mode.summary"
done
echo "logs in $OUT"
exit $rc
