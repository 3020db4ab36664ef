#!/usr/bin/env bash
# Installs the Debian packages tlptm needs to build, test and benchmark, if any is missing.
# Idempotent: when everything is installed it does nothing (no apt-get update).
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

packages=(
    build-essential
    cmake
    pkg-config
    libpmem-dev
    libpmemobj-dev
    doctest-dev
    libbenchmark-dev
    gnuplot-nox
    libgsl-dev
    clang
)

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup-debian.sh: dpkg-query not found; this script needs Debian or Ubuntu." >&2
    echo "setup-debian.sh: install these packages by hand: ${packages[*]}" >&2
    exit 1
fi

missing_packages() {
    local pkg
    for pkg in "${packages[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            echo "$pkg"
        fi
    done
}

mapfile -t missing < <(missing_packages)
if [ "${#missing[@]}" -eq 0 ]; then
    echo "setup-debian.sh: all packages are installed"
    exit 0
fi

echo "setup-debian.sh: installing missing packages: ${missing[*]}"

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    # sudo resets the environment, so pass DEBIAN_FRONTEND explicitly.
    as_root=(sudo env DEBIAN_FRONTEND=noninteractive)
else
    echo "setup-debian.sh: not root and sudo is not available." >&2
    echo "setup-debian.sh: as root, run: apt-get install ${missing[*]}" >&2
    exit 1
fi

if ! "${as_root[@]}" apt-get update ||
    ! "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
    echo "setup-debian.sh: installing failed; missing packages: ${missing[*]}" >&2
    exit 1
fi

mapfile -t still_missing < <(missing_packages)
if [ "${#still_missing[@]}" -ne 0 ]; then
    echo "setup-debian.sh: still missing after installation: ${still_missing[*]}" >&2
    exit 1
fi
echo "setup-debian.sh: all packages are installed"
