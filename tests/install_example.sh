#!/bin/sh
# install_example.sh - `make install` into a scratch prefix, then use the
# installed library as a program outside the tree would: the header compiles
# alone, the shared library exports exactly molprop.h's functions, and
# examples/train_predict.c builds with pkg-config (shared, and static from
# Libs.private) and runs.  Run by tests/test_install.c; prints what failed.
#   install_example.sh SCRATCH_DIR DATA.csv
#   MOLPROP_MAKEVARS         make variables of this build ("SAN=0 CUDA=1 BUILD=build")
#   MOLPROP_EXAMPLE_CFLAGS   extra compiler flags (a SAN build's sanitizers)
set -eu
tmp=$1
data=$2
src=$(pwd)
prefix=$tmp/prefix
cflags=${MOLPROP_EXAMPLE_CFLAGS:-}
unset MAKEFLAGS MFLAGS MAKELEVEL   # a make of its own, not the caller's jobs

# shellcheck disable=SC2086
if ! make -s --no-print-directory ${MOLPROP_MAKEVARS:-} PREFIX="$prefix" install \
        > "$tmp/install.log" 2>&1; then
    echo "make install failed:"; cat "$tmp/install.log"; exit 1
fi
for f in bin/molprop lib/libmolprop.a lib/libmolprop.so lib/libmolprop.so.0 \
         include/molprop.h lib/pkgconfig/molprop.pc share/molprop/datasets.tsv; do
    [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
"$prefix/bin/molprop" version > /dev/null || { echo "the installed molprop does not run"; exit 1; }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cd "$tmp"   # outside the tree: nothing of the checkout is on any path

# The installed binary finds the installed registry (no data/ here).
if ! (unset MOLPROP_REGISTRY; "$prefix/bin/molprop" data list > list.txt 2>&1) ||
        ! grep -q '^esol' list.txt; then
    echo "the installed molprop does not find share/molprop/datasets.tsv:"; cat list.txt; exit 1
fi

# The exports are the header's functions, no more, no fewer.
grep -oE '\bmp_[a-z0-9_]+\(' "$prefix/include/molprop.h" | tr -d '(' | sort -u > declared.txt
nm -D --defined-only "$prefix/lib/libmolprop.so" | awk '{ print $3 }' | sed 's/@.*//' |
    grep -v '^MOLPROP_' | sort -u > exported.txt
if ! diff declared.txt exported.txt > exports.diff; then
    echo "libmolprop.so exports differ from molprop.h (< declared only, > exported only):"
    cat exports.diff; exit 1
fi

# The header alone, as C and as C++, pedantic.
printf '#include <molprop.h>\nint main(void) { return mp_version() == 0; }\n' > header.c
# shellcheck disable=SC2046
cc -std=c99 -pedantic -Wall -Wextra -Werror $(pkg-config --cflags molprop) -c header.c -o header.o ||
    { echo "molprop.h does not compile alone as C99"; exit 1; }
cp header.c header.cpp
# shellcheck disable=SC2046
c++ -Wall -Wextra -Werror $(pkg-config --cflags molprop) -c header.cpp -o header_cpp.o ||
    { echo "molprop.h does not compile as C++"; exit 1; }

# The example, against the shared library: the documented command line.
# shellcheck disable=SC2046,SC2086
cc $cflags $(pkg-config --cflags --libs molprop) "$src/examples/train_predict.c" -o train_predict ||
    { echo "the example does not build against the installed library"; exit 1; }
./train_predict "$data" "$tmp/model_shared" epochs=2 hidden=16 threads=1
# ... and statically, from libmolprop.a and Libs.private.
libs=$(pkg-config --static --libs molprop | sed 's/-lmolprop//')
# shellcheck disable=SC2046,SC2086
cc $cflags $(pkg-config --cflags molprop) "$src/examples/train_predict.c" "$prefix/lib/libmolprop.a" \
    $libs -o train_predict_static ||
    { echo "the example does not link statically"; exit 1; }
if ldd ./train_predict_static | grep -q libmolprop; then
    echo "the static example still needs libmolprop.so"; exit 1
fi
./train_predict_static "$data" "$tmp/model_static" epochs=2 hidden=16 threads=1
cmp -s "$tmp/model_shared/model.mpm" "$tmp/model_static/model.mpm" ||
    { echo "the shared and the static example trained different models"; exit 1; }
echo "install_example: ok"
