#!/usr/bin/env bash
# A GPU bundle with other builds' CUDA plugins beside its own, for side-by-side runs
# (scripts/gpu-ab-plugins.sh) within the device's 64 MiB carry: the plugins (~13 MB each) go
# xz-compressed (~3.8 MB), and .gpu/unpack.sh restores them on the GPU machine (xz, else
# python3's lzma).
#   bash scripts/gpu-pack-plugins.sh [NAME=PLUGIN.so ...]
# e.g. (a plugin built from main, then the branch's in build/):
#   git stash; (cd build && ninja) && cp build/bin/libminfer_backend_cuda.so /tmp/main.so; git stash pop; (cd build && ninja)
#   bash scripts/gpu-pack-plugins.sh main=/tmp/main.so
set -euo pipefail
BUNDLE_VOCAB="${BUNDLE_VOCAB:-qwen2}" ../shared/tools/gpu-bundle.sh build .gpu | tail -1
mkdir -p .gpu/alt
xz -T2 -6 .gpu/build/bin/libminfer_backend_cuda.so
for spec in "$@"; do
  name=${spec%%=*}; so=${spec#*=}
  [ -f "$so" ] || { echo "no plugin file: $so" >&2; exit 2; }
  xz -T2 -6 -c "$so" > ".gpu/alt/plugin-$name.so.xz"
done
cat > .gpu/unpack.sh <<'EOS'
for f in $(find .gpu -name '*.xz'); do
  if command -v xz >/dev/null; then xz -d -f "$f"; else python3 -c "import lzma,sys; open(sys.argv[1][:-3],'wb').write(lzma.open(sys.argv[1]).read())" "$f" && rm "$f"; fi
done
chmod +x .gpu/build/bin/*.so .gpu/alt/*.so 2>/dev/null || true
EOS
size=$(du -sb .gpu | cut -f1)
echo "bundle $((size / 1048576)) MiB in .gpu (the carry's limit is 64 MiB with the working tree)"
