#!/bin/sh
# minfer-app --list-backends must list cpu, cuda (when built; zero devices with a reason
# on a machine without a GPU) and the example plugin found through MINFER_PLUGIN_PATH.
app=$1; template_dir=$2; cuda=$3
out=$(MINFER_PLUGIN_PATH=$template_dir "$app" --list-backends) || { echo "$out"; exit 1; }
echo "$out"
fail() { echo "FAIL: $1"; exit 1; }
echo "$out" | grep -Eq '^cpu +version [0-9.]+ +ABI 1\.[0-9]+' || fail "cpu not listed"
echo "$out" | grep -Eq '^template +version 0\.1\.0 +ABI 1\.[0-9]+' || fail "template plugin not listed"
if [ "$cuda" = cuda ]; then
  echo "$out" | grep -Eq '^cuda +version [0-9.]+ +ABI 1\.[0-9]+' || fail "cuda not listed"
  echo "$out" | grep -A1 '^cuda ' | grep -Eq 'device 0: |no devices: .+' || fail "cuda lists neither devices nor a reason"
fi
echo "list-backends OK"
