#!/usr/bin/env bash
# Installs the pgvector extension into this machine's PostgreSQL server when it is missing
# (the memory service's vector search needs it; its migration creates the extension).
#
# Debian bookworm has no pgvector package for PostgreSQL 15, so this builds Debian's own
# pgvector source package (from trixie's source index, Debian's registry) against the
# installed server's headers (postgresql-server-dev-N): about 15 s on 2 cores. A server
# from another source (the PostgreSQL apt repository, a managed database, the
# pgvector/pgvector container image) brings its own: see deploy/README.md.
# Needs root (apt-get, make install). Idempotent: does nothing when the extension is there.
set -euo pipefail

PGVECTOR_VERSION="${PGVECTOR_VERSION:-0.8.0}"

pg_major="$(pg_config --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/' || true)"
if [ -z "$pg_major" ]; then
  pg_major="$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)"
fi
if [ -z "$pg_major" ]; then
  echo "install_pgvector: no PostgreSQL server found" >&2
  exit 1
fi
if [ -f "/usr/share/postgresql/$pg_major/extension/vector.control" ]; then
  exit 0
fi
echo "installing pgvector $PGVECTOR_VERSION for PostgreSQL $pg_major"

export DEBIAN_FRONTEND=noninteractive
if ! dpkg -s "postgresql-server-dev-$pg_major" >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq "postgresql-server-dev-$pg_major" make gcc >/dev/null
fi

work="$(mktemp -d)"
chmod 755 "$work"  # apt's download user reads it
trap 'rm -rf "$work"' EXIT
# A private source index (its own lists directory), so the machine's apt lists stay as
# they are.
mkdir -p "$work/lists/partial"
cat >"$work/src.sources" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_opts=(-o "Dir::Etc::sourcelist=$work/src.sources" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$work/lists")
apt-get "${apt_opts[@]}" update -qq
# The pinned version, or the index's current one once Debian has moved past it.
(cd "$work" && { apt-get "${apt_opts[@]}" source --download-only -qq "pgvector=$PGVECTOR_VERSION-1" \
  || apt-get "${apt_opts[@]}" source --download-only -qq pgvector; } 2>/dev/null)
tarball="$(ls "$work"/pgvector_*.orig.tar.gz | head -1)"
tar -xzf "$tarball" -C "$work"
src="$(ls -d "$work"/pgvector-*/ | head -1)"
# OPTFLAGS="": no -march=native, so the build runs on any x86-64 the image moves to.
make -C "$src" -j"$(nproc)" OPTFLAGS="" >/dev/null
make -C "$src" install >/dev/null
echo "pgvector $(basename "$src") installed for PostgreSQL $pg_major"
