# homefs — see README.md. Every target runs on a fresh machine (as root for
# the FUSE mounts, with /dev/fuse).

GO        ?= go
PKGS      := ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1x
# The version homefs status and homefs --version report; without it the
# binary reports its VCS revision (internal/version).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)
# urfave_cli_no_docs leaves out urfave/cli's man page and Markdown writer
# (homefs uses neither), whose Markdown parser's package initialisation
# every command, homefs fork as much as serve, paid at start (0.2 ms).
TAGS      ?= urfave_cli_no_docs

.PHONY: all build test test-short bench bench-peers fuzz lint staticcheck demo clean

all: lint build test

# The CLI is built without cgo: a static binary starts without the C
# loader and libc, some 100 fewer page faults for every call (homefs asks
# getent and id for the users and groups only NSS knows: cmd/homefs/users.go).
LDFLAGS   := -X github.com/homefs/homefs/internal/version.Version=$(VERSION)
build:
	CGO_ENABLED=0 $(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o bin/ ./cmd/homefs
	$(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o bin/ ./cmd/homefsd

# The test command (README): every package, with the race detector; then
# the mount's suite again over FUSE over io_uring (fusefs tests use
# /dev/fuse unless told otherwise; HOMEFS_FUSE_URING=1 turns the host's
# switch on for the run if it is off, and off again after it, as the
# end-to-end tests' daemons do with serve --fuse-uring=on); then the
# remote's tests again against encrypted remotes (HOMEFS_TEST_ENCRYPT=1:
# every remote a test makes is encrypted; REMOTE_TESTS names them, in the
# remote package and end to end; about 2 minutes more).
REMOTE_TESTS := Remote|Lease|Push|Pull|Host|Server|Head|Ping|Chunks|Lock|Encrypted|FsckRepair|Service
test:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	HOMEFS_FUSE_URING=1 $(GO) test -race -count=1 -timeout 30m ./fusefs
	HOMEFS_TEST_ENCRYPT=1 $(GO) test -race -count=1 -timeout 30m -run '$(REMOTE_TESTS)' ./internal/remote ./cmd/homefs

test-short:
	$(GO) test -count=1 -short $(PKGS)

# Benchmarks with ratios against the native disk measured in the same run,
# then the side-by-side run (bench-peers; BENCH_PEERS=0 skips it), then
# what one daemon holds per idle mount at 200 and 1,000 mounts
# (scripts/bench-scale.sh); as root. HOMEFS_BENCH_SCALE=small for a quick
# pass. See docs/BENCHMARKS.md.
bench:
	scripts/bench.sh
	scripts/bench-scale.sh

# homefs side by side with ext4, overlayfs and fuse-overlayfs on one loop
# disk, and capture/fork against btrfs snapshots: table, JSON and chart.
bench-peers:
	scripts/bench-peers.sh

# Every fuzz target, briefly, seeded from testdata.
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# gofmt, vet, every staticcheck check (staticcheck.conf, at a pinned
# version fetched through the module proxy), and the two bounds on a
# function a reader must hold in mind at once, tests included: cyclomatic
# complexity 24 (gocyclo, a tool of go.mod) and 99 lines
# (internal/lint/funclen); that packages import only downward through the
# layers (internal/lint/layers, docs/ARCHITECTURE.md); that the binaries
# link no test harness (internal/testkit, fusefstest) and not package
# testing; that the CLI links none of the daemon (go-fuse, Prometheus,
# fusefs, internal/daemon), nor net/http, crypto/tls, zstd, internal/remote
# or a progress bar library, whose package initialisation each of its
# calls would pay at start (GODEBUG=inittrace=1); and that cas, and manifest,
# fork, the catalog, fsck and archive above it, link no Badger, zstd,
# protobuf or OpenTelemetry, for the same reason.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)
	$(GO) tool gocyclo -over 24 .
	$(GO) run ./internal/lint/funclen
	$(GO) run ./internal/lint/layers
	@if $(GO) list -deps ./cmd/homefs ./cmd/homefsd | grep -E '/internal/testkit/|/fusefs/fusefstest$$|^testing$$'; then echo "a binary links test harnesses (internal/testkit, fusefstest or testing)"; exit 1; fi
	@if $(GO) list -deps ./cmd/homefs | grep -E 'go-fuse|prometheus|/homefs/fusefs|/homefs/internal/daemon$$'; then echo "the CLI (cmd/homefs) links the daemon's packages: reach the daemon through internal/api"; exit 1; fi
	@if $(GO) list -deps -tags "$(TAGS)" ./cmd/homefs | grep -E '^(net/http|crypto/tls|crypto/x509|log/slog)$$|klauspost|progressbar|/homefs/internal/remote$$|/homefs/cas/stored$$'; then echo "the CLI (cmd/homefs) links net/http, crypto/tls, zstd, a progress bar library or internal/remote: each call would pay for their package initialisation at start (internal/api speaks HTTP itself; internal/remote/remotetypes holds the remote's types)"; exit 1; fi
	@if $(GO) list -deps ./cmd/homefs ./internal/remote | grep -E 'github.com/aws/'; then echo "the CLI (cmd/homefs) or internal/remote links the AWS SDK: keep S3 code in internal/remote/s3"; exit 1; fi
	@if $(GO) list -deps ./cas ./manifest ./fork ./internal/catalog ./internal/fsck ./internal/archive | grep -E 'dgraph-io|klauspost|opentelemetry|protobuf'; then echo "cas or a package above it links the above (Badger belongs in cas/badgerstore, zstd in cas/stored)"; exit 1; fi

staticcheck:
	$(STATICCHECK) $(PKGS)

# The README's "run" command: a daemon on a temporary root, a session
# mounted, captured, forked and compared.
demo: build
	scripts/demo.sh

clean:
	rm -rf bin
