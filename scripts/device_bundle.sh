#!/bin/sh
# device_bundle.sh - gather what a GPU machine without RDKit needs to run our
# binaries: the binaries themselves, every non-CUDA, non-libc shared library
# that ldd lists, and the named dataset files.  Usage:
#   scripts/device_bundle.sh DEST BIN... [-- DATASET...]
# Run there with LD_LIBRARY_PATH=DEST/lib.
set -e
dest=$1; shift
mkdir -p "$dest/lib" "$dest/bin" "$dest/data"
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    cp "$1" "$dest/bin/"
    ldd "$1" | awk '/=>/ {print $3}' | while read -r lib; do
        case "$lib" in
            */libnccl*|*/libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*|*/libcuda*|*/libcublas*|*/libcudart*) ;;
            *) cp -L "$lib" "$dest/lib/" ;;
        esac
    done
    shift
done
[ "${1:-}" = "--" ] && shift
for d in "$@"; do cp "$d" "$dest/data/"; done
du -sh "$dest"
# The device takes at most 64 MiB: pack it (OpenBLAS alone is 36 MB raw).
strip "$dest"/bin/* 2>/dev/null || true
tar -C "$dest" -czf "$dest.tgz" bin lib data
rm -rf "$dest"; mkdir -p "$dest"; mv "$dest.tgz" "$dest/bundle.tgz"
du -sh "$dest"
