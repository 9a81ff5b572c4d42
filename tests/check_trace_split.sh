#!/bin/sh
# A trace of a split: tensor run: every node once per step, the all-reduces too (timed on the
# host around the collective), valid against docs/trace.schema.json.
set -u
app=$1; work=$2
[ -f ../shared/testdata/models/stories260K.gguf ] || { echo "SKIP: ../shared/testdata/models/stories260K.gguf is absent"; exit 0; }
rm -rf "$work" && mkdir -p "$work" || exit 1
MINFER_TRACE="$work/trace.json" "$app" --config tests/data/two-cpu-tensor.yaml > "$work/run.log" 2>&1 || { echo "FAIL: minfer-app: $(cat "$work/run.log")"; exit 1; }
python3 tests/validate_trace.py docs/trace.schema.json "$work/trace.json" || { echo "FAIL: schema"; exit 1; }
grep -q '"all_reduce"' "$work/trace.json" || { echo "FAIL: no all_reduce node in the trace"; exit 1; }
echo "trace of split: tensor valid"
