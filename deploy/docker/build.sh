#!/usr/bin/env bash
# Builds the daemon image (homefs) and the test-suite image (homefs-test)
# from the repository, then checks both for real (smoke.sh).
#
#   deploy/docker/build.sh            # bases from Docker Hub
#   HOMEFS_LOCAL_BASES=1 deploy/docker/build.sh
#
# HOMEFS_LOCAL_BASES=1 is for a host that reaches Debian's mirror and the
# module and npm registries but no container registry: it makes the base
# images itself, Debian bookworm by debootstrap plus this host's Go and
# Node.js, laid out as the official golang and node images are, and passes
# them as build arguments. Needs a running Docker engine; as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${HOMEFS_IMAGE_CACHE:-/var/cache/homefs-images}
args=(--network host --build-arg "VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)")

if [ "${HOMEFS_LOCAL_BASES:-}" = 1 ]; then
	if ! docker image inspect homefs-local/debian:bookworm >/dev/null 2>&1; then
		if [ ! -x "$cache/rootfs/bin/sh" ]; then
			mkdir -p "$cache"
			debootstrap --variant=minbase bookworm "$cache/rootfs" http://deb.debian.org/debian
		fi
		# The host's CA bundle goes in as it is: a host whose registries
		# are reached through its own TLS proxy trusts that proxy's CA.
		tar -C "$cache/rootfs" -c . | docker import \
			--change 'ENV SSL_CERT_FILE=/etc/ssl/host-ca-certificates.crt' \
			--change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/host-ca-certificates.crt' \
			- homefs-local/debian:bookworm-raw
		ctx=$(mktemp -d)
		cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca.crt"
		printf 'FROM homefs-local/debian:bookworm-raw\nCOPY ca.crt /etc/ssl/host-ca-certificates.crt\n' >"$ctx/Dockerfile"
		docker build -t homefs-local/debian:bookworm "$ctx"
		rm -rf "$ctx"
	fi
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
	go=$(dirname "$(dirname "$(command -v go)")")
	if ! docker image inspect homefs-local/golang:bookworm >/dev/null 2>&1; then
		cp -a "$go" "$ctx/go"
		cat >"$ctx/Dockerfile" <<-'DOCKERFILE'
			FROM homefs-local/debian:bookworm
			RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
				--no-install-recommends ca-certificates git gcc libc6-dev make \
				&& rm -rf /var/lib/apt/lists/*
			COPY go /usr/local/go
			ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		DOCKERFILE
		docker build --network host -t homefs-local/golang:bookworm "$ctx"
		rm -rf "${ctx:?}"/*
	fi
	if ! docker image inspect homefs-local/node:bookworm >/dev/null 2>&1; then
		node=$(command -v node)
		npm=$(readlink -f "$(dirname "$(readlink -f "$(command -v npm)")")/..")
		mkdir -p "$ctx/node"
		cp "$node" "$ctx/node/node"
		cp -a "$npm" "$ctx/node/npm"
		cat >"$ctx/Dockerfile" <<-'DOCKERFILE'
			FROM homefs-local/debian:bookworm
			COPY node/node /usr/local/bin/node
			COPY node/npm /usr/local/lib/node_modules/npm
		DOCKERFILE
		docker build --network host -t homefs-local/node:bookworm "$ctx"
	fi
	args+=(--build-arg GO_IMAGE=homefs-local/golang:bookworm
		--build-arg BASE_IMAGE=homefs-local/debian:bookworm
		--build-arg NODE_IMAGE=homefs-local/node:bookworm)
fi

docker build "${args[@]}" -f deploy/docker/Dockerfile -t homefs .
docker build "${args[@]}" -f deploy/docker/Dockerfile.test -t homefs-test .
deploy/docker/smoke.sh
