#!/bin/sh
# An install under a prefix chosen at install time finds its plugins from any working
# directory (PREFIX/bin/../lib/minfer), and a third-party plugin built with the installed SDK
# and installed into the same prefix is found too, with no MINFER_PLUGIN_PATH.
#   check_install.sh PREFIX TEMPLATE_BUILD REPO cuda|nocuda
set -u
prefix=$1; template_build=$2; repo=$3; cuda=$4
fail() { echo "FAIL: $1"; exit 1; }
app=$prefix/bin/minfer-app
[ -x "$app" ] || fail "$app is not installed"
cmake --install "$template_build" --prefix "$prefix" > /dev/null || fail "installing the template plugin into $prefix"
[ -f "$prefix/lib/minfer/libminfer_backend_template.so" ] || fail "minfer_sdk_add_plugin installs into PREFIX/lib/minfer"
cd / || fail "cd /"
out=$(env -u MINFER_PLUGIN_PATH "$app" --config "$repo/configs/cpu.yaml" --list-backends 2>&1) || fail "list-backends from /: $out"
echo "$out"
echo "$out" | grep -Eq '^cpu +version [0-9.]+ +ABI 1\.[0-9]+ +'"$prefix"'/lib/minfer/' || fail "cpu found in $prefix/lib/minfer"
echo "$out" | grep -Eq '^template +version 0\.1\.0 ' || fail "the installed template plugin is listed"
if [ "$cuda" = cuda ]; then
  echo "$out" | grep -Eq '^cuda +version ' || fail "cuda listed"
fi
# The installed app runs the demo graph on the installed template plugin (mixed.yaml).
out=$(env -u MINFER_PLUGIN_PATH "$app" --config "$repo/examples/plugin-template/mixed.yaml" 2>&1) || fail "mixed.yaml: $out"
echo "$out" | grep -q 'demo.out_f16 .* -> OK' || fail "mixed.yaml output: $out"
echo "install OK"
