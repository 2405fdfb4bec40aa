#!/bin/sh
# bench/gpu_fmnist/fetch-data.sh — copies the four Fashion-MNIST .gz files into bench/data/ (git-ignored)
# so that the dataset travels with the checkout to a machine that lacks it. Not a downloader.
#   usage: bench/gpu_fmnist/fetch-data.sh [SOURCE_DIR]   (default /usr/share/datasets/fashion-mnist)
set -eu
cd "$(dirname "$0")/../.."
src=${1:-/usr/share/datasets/fashion-mnist}
mkdir -p bench/data
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$src/$f" ] || { echo "fetch-data.sh: $src/$f not found" >&2; exit 1; }
    cp "$src/$f" bench/data/
done
echo "copied the Fashion-MNIST files from $src to bench/data/ ($(du -sh bench/data | cut -f1))"
