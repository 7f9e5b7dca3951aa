#!/usr/bin/env bash
# Makes a container runtime usable for gem-terminal's container backend, as a user would, and prints
# which one. Used by `tox -e terminal-container`.
#   scripts/container_runtime.sh [podman|docker]   (default: podman, or $GEM_CONTAINER_RUNTIME)
# A Docker daemon that answers already is used as it is. Else, where Debian's docker.io is installed
# (or asked for), dockerd is started here as root; else Podman + runc are installed from Debian's
# packages (the default: 40 packages, 33 MB against docker.io's 66 MB, and no daemon to start).
# mmdebstrap (base images from Debian's mirror) comes with either. Idempotent.
set -euo pipefail

want=${1:-${GEM_CONTAINER_RUNTIME:-podman}}
case "$want" in podman | docker) ;; *) echo "usage: $0 [podman|docker]" >&2; exit 2 ;; esac
home=${GEM_CONTAINER_HOME:-/var/lib/gem-terminal}

docker_answers() { docker version --format '{{.Server.Version}}' > /dev/null 2>&1; }

install() {
    if [ "$(id -u)" != 0 ]; then
        echo "missing $*: run as root, or apt-get install $*" >&2
        exit 1
    fi
    local started
    started=$(date +%s)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "$@"
    echo "installed $* in $(($(date +%s) - started)) s"
}

start_dockerd() {
    # As root, storage under $GEM_CONTAINER_HOME/docker; the default socket unless DOCKER_HOST names one.
    local socket=${DOCKER_HOST:-unix:///var/run/docker.sock}
    mkdir -p "$home/docker"
    nohup dockerd --data-root "$home/docker/data" --exec-root "$home/docker/exec" \
        --pidfile "$home/docker/dockerd.pid" -H "$socket" > "$home/docker/dockerd.log" 2>&1 &
    for _ in $(seq 60); do
        docker_answers && return 0
        sleep 0.5
    done
    echo "dockerd did not answer in 30 s; its log: $home/docker/dockerd.log" >&2
    tail -5 "$home/docker/dockerd.log" >&2
    exit 1
}

if docker_answers; then
    echo "container runtime: docker (daemon answers)"
    exit 0
fi
if [ "$want" = docker ] || { command -v dockerd > /dev/null && [ "$(id -u)" = 0 ]; }; then
    missing=()
    command -v dockerd > /dev/null || missing+=(docker.io)
    command -v mmdebstrap > /dev/null || missing+=(mmdebstrap)
    [ ${#missing[@]} -eq 0 ] || install "${missing[@]}"
    start_dockerd
    echo "container runtime: docker (dockerd started)"
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
install podman runc mmdebstrap uidmap
echo "container runtime: podman"
