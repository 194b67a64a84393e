#!/usr/bin/env bash
# Extracts the Debian packages of chordrt's header-only dependencies into .deps/root (git-ignored), for
# machines that lack them (the lent GPU box). CMake prefers .deps/root/usr/include over the system's.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libfmt-dev libspdlog-dev libxxhash-dev nlohmann-json3-dev libcli11-dev catch2)
mkdir -p .deps/debs .deps/root
if ! (cd .deps/debs && apt-get download "${packages[@]}" >/dev/null 2>&1); then
  apt-get update -qq
  (cd .deps/debs && apt-get download "${packages[@]}")
fi
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
echo "dependency headers in .deps/root/usr/include: $(ls .deps/root/usr/include | tr '\n' ' ')"
