#!/bin/sh
# The trace end to end: minfer-app writes one (MINFER_TRACE), it matches docs/trace.schema.json,
# and viz/index.html in headless Chromium renders its nodes, shows a clicked node's statistics,
# and in compare mode marks the first node where a second trace diverges. The screenshot is
# kept as a test artefact: build/viz-test/screenshot.png.
set -u
app=$1; work=$2
fail() { echo "FAIL: $1"; [ -n "${server:-}" ] && kill "$server" 2>/dev/null; exit 1; }
command -v chromium >/dev/null || fail "chromium is not installed (scripts/setup.sh installs it)"
command -v python3 >/dev/null || fail "python3 is not installed"
rm -rf "$work" && mkdir -p "$work/site" || fail "cannot make $work"
if [ -f ../shared/testdata/models/stories260K.gguf ]; then cfg=configs/cpu.yaml; else cfg=configs/demo.yaml; fi
MINFER_TRACE="$work/site/trace.json" "$app" --config "$cfg" -n 6 --temp 0 > "$work/run.log" 2>&1 || fail "minfer-app: $(cat "$work/run.log")"
python3 tests/validate_trace.py docs/trace.schema.json "$work/site/trace.json" || fail "schema"
cp viz/index.html viz/viewer.js viz/viewer.css "$work/site/"
# A compare trace whose statistics drift from node 20 on: the viewer must mark node 20.
python3 - "$work/site/trace.json" "$work/site/compare.json" <<'PY' || fail "making the compare trace"
import json, sys
t = json.load(open(sys.argv[1]))
for s in t["steps"]:
    for r in s["nodes"]:
        if r["id"] >= 20 and "stats" in r:
            r["stats"]["mean"] += 1.0
json.dump(t, open(sys.argv[2], "w"))
print(t["graph"]["nodes"][20]["name"])
PY
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$work/site" && exec python3 -m http.server "$port" --bind 127.0.0.1 > ../http.log 2>&1) &
server=$!
sleep 1
flags="--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --user-data-dir=$work/profile --virtual-time-budget=15000"
base="http://127.0.0.1:$port/index.html?trace=trace.json&step=0"
node=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["graph"]["nodes"][6]["name"])' "$work/site/trace.json")
# shellcheck disable=SC2086
timeout 90 chromium $flags --dump-dom "$base&select=$node&autotest=1" > "$work/dom.html" 2>/dev/null
# shellcheck disable=SC2086
timeout 90 chromium $flags --dump-dom "$base&compare=compare.json&autotest=1" > "$work/dom-compare.html" 2>/dev/null
# shellcheck disable=SC2086
timeout 90 chromium $flags --window-size=1400,1000 --screenshot="$work/screenshot.png" "$base&select=$node" > /dev/null 2>&1
kill "$server" 2>/dev/null
python3 - "$work" "$node" <<'PY' || fail "viewer checks"
import html, json, re, sys
work, node = sys.argv[1], sys.argv[2]
def result(name):
    m = re.search(r'<pre id="test-result">(.*?)</pre>', open(f"{work}/{name}").read(), re.S)
    if not m:
        sys.exit(f"no test result in {name}: the page did not finish")
    return json.loads(html.unescape(m.group(1)))
trace = json.load(open(f"{work}/site/trace.json"))
r = result("dom.html")
print("single:", r)
n = len(trace["graph"]["nodes"])
assert r["nodes_rendered"] == n, f"{r['nodes_rendered']} of {n} nodes rendered"
assert r["selected"] == node, "the clicked node is not selected"
assert r["stats_rows"] == 8, "the statistics table is missing"
assert r["heatmap"], "no heatmap for the selected node"
assert r["timeline_bars"] == n, "timeline bars"
assert r["tokens"] > 0, "no token distribution"
assert r["slowest"].startswith("slowest: "), "no slowest node"
c = result("dom-compare.html")
print("compare:", c)
assert c["diverged"] == 1 and c["diverged_node"] == trace["graph"]["nodes"][20]["name"], "compare mode did not mark node 20"
PY
[ -s "$work/screenshot.png" ] || fail "no screenshot"
echo "viewer OK (screenshot: $work/screenshot.png)"
