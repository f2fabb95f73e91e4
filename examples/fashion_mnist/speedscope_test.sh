#!/bin/bash
# Reads the Chrome traces of fashion_mnist --profile-steps (written by profile_test.cmake) with
# speedscope's importer, a reader nobody here wrote: tests/tools/speedscope_import.js.
#
#   speedscope_test.sh <dir of the traces> <npm prefix> <speedscope_import.js>
#
# speedscope is installed with npm into <npm prefix> (in the build tree) the first time. Without
# node and npm, or when the installation fails (no network), the test is skipped: exit status 77,
# which ctest reports as "Skipped" (SKIP_RETURN_CODE), with the reason. The version is pinned: the
# script finds speedscope's importer in its bundle by the bundle's shape.
set -u
traces=$1
prefix=$2
reader=$3
version=1.25.0
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIPPED: node and npm are needed to install speedscope (Debian: apt-get install nodejs npm)"
  exit 77
fi
package=$prefix/node_modules/speedscope
if ! grep -q "\"version\": \"$version\"" "$package/package.json" 2> /dev/null; then
  mkdir -p "$prefix"
  echo "installing speedscope@$version with npm into $prefix"
  # One retry after 2-5 s: where the registry cannot be reached, npm's default retries spend
  # about 70 s before the skip.
  if ! timeout 300 npm install --prefix "$prefix" --no-audit --no-fund --no-save \
      --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
      "speedscope@$version" > "$prefix/npm-install.log" 2>&1; then
    tail -n 5 "$prefix/npm-install.log"
    echo "SKIPPED: npm install speedscope@$version failed (no network?); see $prefix/npm-install.log"
    exit 77
  fi
fi
shopt -s nullglob
files=("$traces"/chrome-trace-*.json)
if [ ${#files[@]} -eq 0 ]; then
  echo "no chrome-trace-*.json in $traces (example_fashion_mnist_profile writes them)"
  exit 1
fi
exec node "$reader" "$package" --expect aten::conv2d --expect aten::batch_norm \
  --expect aten::addmm "${files[@]}"
