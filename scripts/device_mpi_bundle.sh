#!/bin/sh
# device_mpi_bundle.sh - gather Debian's Open MPI runtime (4.1, ORTE: no
# prte) into a folder that runs from wherever it is copied, for a machine
# without MPI (the GPU machine: Ubuntu 24.04, no mpirun, no network).
#
#   scripts/device_mpi_bundle.sh [DEST]      (default .dev/mpi, ignored by git)
#
# DEST/bin/mpirun is a wrapper: it finds DEST from its own path, points Open
# MPI (OPAL_*), PMIx (PMIX_*) and hwloc at the folder, puts DEST/lib first
# on LD_LIBRARY_PATH (the ranks inherit it: their libmpi is DEST's), and
# runs DEST/bin/orterun.  Use it as
#   PATH=DEST/bin:$PATH mpirun --allow-run-as-root -np 2 molprop predict ...
# What it holds: orterun, orted, ompi_info; libmpi, libopen-rte,
# libopen-pal, libpmix, hwloc, libevent and every other library they and
# the plugins load (ldd, less the C library's own); the MCA plugins
# (DEST/lib/openmpi) but those for fabrics a single machine does not use
# (UCX, libfabric, PSM, verbs: each needs libraries of its own, and a
# plugin that cannot load prints a warning at every start); PMIx's plugins
# (DEST/lib/pmix); the help texts (DEST/share) and the default parameter
# files (DEST/etc).  The size is printed at the end (~10 MiB, 3.4 MiB
# packed as DEST.tgz).
set -e
dest=${1:-.dev/mpi}
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
sys=/usr/lib/$arch
ompi=$sys/openmpi/lib/openmpi3
pmix=$sys/pmix2/lib/pmix
for f in /usr/bin/orterun /usr/bin/orted "$ompi" "$sys/libmpi.so.40"; do
    [ -e "$f" ] || { echo "device_mpi_bundle: $f is missing (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib/openmpi" "$dest/lib/pmix" "$dest/lib/hwloc" \
         "$dest/share/openmpi" "$dest/share/pmix" "$dest/etc"

# the C library's own, which every machine has (and must not be mixed)
is_system() {
    case "$1" in
        */libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*|*/libgcc_s.so*|*/libstdc++.so*|*/libresolv.so*|*/libutil.so*) return 0 ;;
    esac
    return 1
}
# the fabrics' libraries: plugins that need them are left out
is_fabric() {
    ldd "$1" 2>/dev/null | grep -qE 'libucp|libucs|libuct|libfabric|libpsm|libibverbs|librdmacm|libcuda|not found'
}
copy_deps() {
    ldd "$1" | awk '/=>/ && $3 ~ /^\// {print $3}' | while read -r lib; do
        is_system "$lib" && continue
        [ -e "$dest/lib/$(basename "$lib")" ] || cp -L "$lib" "$dest/lib/"
    done
}

for b in orterun orted ompi_info; do
    cp /usr/bin/$b "$dest/bin/"
    copy_deps /usr/bin/$b
done
cp -L "$sys/libmpi.so.40" "$dest/lib/"
copy_deps "$sys/libmpi.so.40"
skipped=0
for p in "$ompi"/*.so; do
    # OpenSHMEM's and MPI-IO's plugins: molprop calls neither
    case "$(basename "$p")" in
        mca_spml_*|mca_sshmem_*|mca_scoll_*|mca_memheap_*|mca_atomic_*|mca_io_*|mca_fs_*|mca_fcoll_*|mca_fbtl_*|mca_sharedfp_*|mca_vprotocol_*) continue ;;
    esac
    if is_fabric "$p"; then skipped=$((skipped + 1)); continue; fi
    cp "$p" "$dest/lib/openmpi/"
    copy_deps "$p"
done
if [ -d "$pmix" ]; then
    for p in "$pmix"/*.so; do cp "$p" "$dest/lib/pmix/"; copy_deps "$p"; done
fi
cp /usr/share/openmpi/*.txt "$dest/share/openmpi/" 2>/dev/null || true
[ -d "$sys/pmix2/share/pmix" ] && cp "$sys/pmix2/share/pmix"/help-*.txt "$dest/share/pmix/"
[ -f "$sys/pmix2/share/pmix-mca-params.conf" ] && cp "$sys/pmix2/share/pmix-mca-params.conf" "$dest/etc/"
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$dest/etc/" 2>/dev/null || true
strip --strip-unneeded "$dest"/bin/orterun "$dest"/bin/orted "$dest"/bin/ompi_info \
    "$dest"/lib/*.so* "$dest"/lib/openmpi/*.so "$dest"/lib/pmix/*.so 2>/dev/null || true

cat > "$dest/bin/mpirun" <<'EOF'
#!/bin/sh
# The bundle's mpirun (scripts/device_mpi_bundle.sh): Open MPI from this
# folder, wherever it is.
here=$(cd "$(dirname "$0")/.." && pwd)
export OPAL_PREFIX="$here" OPAL_EXEC_PREFIX="$here" OPAL_BINDIR="$here/bin" \
       OPAL_LIBDIR="$here/lib" OPAL_PKGLIBDIR="$here/lib/openmpi" \
       OPAL_DATAROOTDIR="$here/share" OPAL_DATADIR="$here/share" \
       OPAL_PKGDATADIR="$here/share/openmpi" OPAL_SYSCONFDIR="$here/etc" \
       OPAL_LIBEXECDIR="$here/bin"
export OMPI_MCA_mca_base_component_path="$here/lib/openmpi" \
       OMPI_MCA_mca_base_param_files="$here/etc/openmpi-mca-params.conf" \
       OMPI_MCA_orte_default_hostfile="$here/etc/openmpi-default-hostfile"
export PMIX_PREFIX="$here" PMIX_INSTALL_PREFIX="$here" PMIX_LIBDIR="$here/lib" \
       PMIX_PKGLIBDIR="$here/lib/pmix" PMIX_DATADIR="$here/share" \
       PMIX_PKGDATADIR="$here/share/pmix" PMIX_SYSCONFDIR="$here/etc" \
       PMIX_MCA_mca_base_component_path="$here/lib/pmix"
# hwloc's plugins: none (a machine's own, of another hwloc, stay out)
export HWLOC_PLUGINS_PATH="$here/lib/hwloc"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$here/bin/orterun" "$@"
EOF
chmod +x "$dest/bin/mpirun"
ln -sf mpirun "$dest/bin/mpiexec"
echo "device_mpi_bundle: $dest: $(du -sh "$dest" | cut -f1) ($skipped fabric plugins left out)"
tar -C "$(dirname "$dest")" -czf "$dest.tgz" "$(basename "$dest")"
echo "device_mpi_bundle: $dest.tgz: $(du -sh "$dest.tgz" | cut -f1)"
