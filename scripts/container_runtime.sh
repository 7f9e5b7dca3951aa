#!/usr/bin/env bash
# Installs a container runtime for gem-terminal's container backend where none is usable, as a user
# would: Docker where its daemon answers already; else Podman + runc + mmdebstrap from Debian's
# packages (root). Idempotent: a second run installs nothing. Used by `tox -e terminal-container`.
set -euo pipefail

if docker version --format '{{.Server.Version}}' > /dev/null 2>&1; then
    echo "container runtime: docker (daemon answers)"
    exit 0
fi
missing=()
for tool in podman runc mmdebstrap; do
    command -v "$tool" > /dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "container runtime: podman (installed)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "missing ${missing[*]}: run as root, or apt-get install podman runc mmdebstrap uidmap" >&2
    exit 1
fi
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 podman runc mmdebstrap uidmap
echo "container runtime: podman installed in $(( $(date +%s) - started )) s"
