#!/bin/sh
# deps.sh - make sure molprop's Debian 12 build dependencies are installed.
# As root it installs what is missing with apt-get; otherwise it prints the
# exact command to run and fails.
set -e
PKGS="build-essential librdkit-dev libdnnl-dev libjemalloc2 rdkit-data libboost-dev libopenblas-dev libcsv-dev zlib1g-dev libcjson-dev libinih-dev libssl-dev libcurl4-openssl-dev gnuplot-nox libopenmpi-dev openmpi-bin"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" = 0 ]; then
    echo "deps: installing$missing" >&2
    sh -c "$cmd"
else
    echo "deps: missing Debian packages:$missing" >&2
    echo "deps: run as root:  $cmd" >&2
    exit 1
fi
