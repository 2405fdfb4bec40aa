#!/bin/sh
# bench/gpu_kit.sh — packs what a bare GPU machine lacks to build and check glia into gpu-kit/
# (git-ignored), so that it travels with the checkout: the generated build system (configure,
# Makefile.in, build-aux/: no autotools needed there), the headers and shared libraries of oneDNN,
# CUnit and zlib (with oneDNN's OpenCL loader) from this Debian 12 machine, the Fashion-MNIST
# files and bench/gpt2's token files. Not an installer: bench/gpu_acceptance.sh build unpacks
# and uses it.
#   usage: bench/gpu_kit.sh      (run from a bootstrapped tree on a machine with the -dev packages)
set -eu
cd "$(dirname "$0")/.."
kit=gpu-kit
./bootstrap  # always: a configure older than configure.ac or a Makefile.am would be packed stale
rm -rf "$kit"
mkdir -p "$kit/stage/include" "$kit/stage/lib" "$kit/data"
tar czf "$kit/build-files.tar.gz" configure Makefile.in aclocal.m4 build-aux m4 core/build-config.h.in
inc=/usr/include lib=/usr/lib/x86_64-linux-gnu
cp -a "$inc/oneapi" "$inc"/dnnl*.h "$inc/CUnit" "$inc/zlib.h" "$inc/zconf.h" "$kit/stage/include/"
for l in libdnnl.so libcunit.so libz.so libOpenCL.so; do
    real=$(readlink -f "$lib/$l")
    cp "$real" "$kit/stage/lib/"
    for link in "$lib/$l" "$lib/$l".[0-9]*; do  # the names that point at it
        [ -L "$link" ] && ln -sf "$(basename "$real")" "$kit/stage/lib/$(basename "$link")"
    done
done
tar czf "$kit/deps.tar.gz" -C "$kit/stage" include lib
rm -rf "$kit/stage"
src=/usr/share/datasets/fashion-mnist
[ -f bench/data/train-images-idx3-ubyte.gz ] && src=bench/data
cp "$src"/train-images-idx3-ubyte.gz "$src"/train-labels-idx1-ubyte.gz "$src"/t10k-images-idx3-ubyte.gz \
    "$src"/t10k-labels-idx1-ubyte.gz "$kit/data/"
mkdir -p "$kit/gpt2-data"  # bench/gpt2's token files (Debian's fortunes, a byte a token)
/usr/bin/python3 bench/gpt2/gen_tokens.py "$kit/gpt2-data" > /dev/null
echo "$kit: $(du -sh "$kit" | cut -f1) (carry it: run(carry=[\"$kit\"]); then bench/gpu_acceptance.sh build OUTDIR)"
