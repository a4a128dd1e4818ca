#!/bin/sh
# mpi_bundle_check.sh - proves that the Open MPI bundle of
# scripts/device_mpi_bundle.sh runs from where it was copied, with the
# system's Open MPI out of reach: in a private mount namespace (root,
# util-linux unshare) the system's Open MPI folders are covered by an empty
# one and its binaries and libraries by /dev/null (a load of any of them
# would fail, not fall back), then `mpirun -np 2 molprop predict` from the
# bundle must give the one-process predictions byte for byte; every MPI
# library the run initialised is listed by folder (LD_DEBUG=libs).
#
#   sh scripts/mpi_bundle_check.sh BUNDLE [MOLPROP_BIN] [WORKDIR]
#   (e.g. cp -r .dev/mpi /tmp/elsewhere/ && sh scripts/mpi_bundle_check.sh /tmp/elsewhere/mpi)
set -eu
bundle=$(cd "$1" && pwd)
bin=$(cd "$(dirname "${2:-build/molprop}")" && pwd)/$(basename "${2:-build/molprop}")
work=${3:-/tmp/mpi-bundle-check}
data=${DATA_DIR:-${MOLPROP_DATA_MIRROR:-$(pwd)/../shared/datasets}}
mkdir -p "$work/empty"
cd "$work"
zcat "$data/esol.csv.gz" | head -301 > e300.csv
[ -s model/model.mpm ] || "$bin" train --data e300.csv --epochs 2 --hidden 32 --quiet --save-dir model >/dev/null
"$bin" predict --model model/model.mpm --data e300.csv --out one.csv --threads 1 --quiet
cat > inside.sh <<EOF
set -e
A=/usr/lib/\$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for d in \$A/openmpi \$A/pmix2 /usr/share/openmpi /etc/openmpi; do
    [ -d "\$d" ] && mount --bind "$work/empty" "\$d"
done
for f in /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info \$A/libmpi.so.40* \$A/libopen-rte.so.40* \\
         \$A/libopen-pal.so.40* \$A/libhwloc.so.15* \$A/libevent_core-2.1.so.7* \\
         \$A/libevent_pthreads-2.1.so.7* \$A/libmca_common_*; do
    [ -f "\$f" ] && [ ! -L "\$f" ] && mount --bind /dev/null "\$f"
done
export PATH="$bundle/bin:/usr/bin:/bin"
unset LD_LIBRARY_PATH
echo "mpirun: \$(command -v mpirun); the system's Open MPI plugins: \$(ls \$A/openmpi | wc -l) files"
rm -rf ld && mkdir ld
LD_DEBUG=libs LD_DEBUG_OUTPUT=$work/ld/ld mpirun --allow-run-as-root --oversubscribe \\
    -x LD_DEBUG -x LD_DEBUG_OUTPUT -np 2 "$bin" predict --model model/model.mpm \\
    --data e300.csv --out two.csv --threads 1 --quiet
cmp one.csv two.csv && echo "OK: 2 ranks from the bundle gave the one-process predictions byte for byte"
echo "MPI libraries initialised (mpirun and the ranks), by folder:"
cat ld/ld.* | sed -n 's/.*calling init: //p' | grep -E 'mpi|open-|pmix|hwloc|event|mca_' |
    xargs -n1 dirname | sort | uniq -c
EOF
unshare -m --propagation private sh inside.sh
