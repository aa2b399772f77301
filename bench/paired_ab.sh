#!/usr/bin/env bash
# Paired A/B on the shared harness: this checkout against another revision, in alternation.
#
#   bench/paired_ab.sh [REV=HEAD] [ROUNDS=8] [SCENARIOS="A B"]
#
# The machine this runs on is shared and has slow and fast phases lasting tens of seconds, so
# two runs minutes apart compare the machine more than the code. This starts both gateways side
# by side (REV from a temporary git worktree, each with its own fake Telegram and fake LLM from
# ../shared/bench, both on .venv's Python) and drives them in turns: round i runs scenario A
# (1 chat x 50 messages, LLM 0 s) and B (100 chats at once, LLM 1 s) on one, then on the other;
# with SCENARIOS="A B C" also C (500 chats x 2 messages, LLM 1 s).
# It prints each side's medians and the medians of the per-round ratios (this / REV).
set -euo pipefail
REV=${1:-HEAD}
ROUNDS=${2:-8}
SCENARIOS=${3:-A B}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${CHATGATE_SHARED_BENCH:-$HERE/../shared/bench}
PY=$HERE/.venv/bin/python
WORK=$(mktemp -d)
git -C "$HERE" worktree add -q --detach "$WORK/base" "$REV"
PIDS=()
cleanup() {
  kill "${PIDS[@]}" 2>/dev/null || true
  git -C "$HERE" worktree remove --force "$WORK/base" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# One gateway: its code at ROOT (the editable install's import hook is set aside), fakes on free ports.
cat > "$WORK/run_at.py" <<'PYEOF'
import sys
root = sys.argv[1]
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, root)
try:
    from gateway.cli.launch import main  # the console script's entry point, where there is one
except ImportError:
    from gateway.cli import main
sys.exit(main(["run"]))
PYEOF
port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
start() {  # name root
  local name=$1 root=$2 home=$WORK/home-$1 tg llm
  tg=$(port); llm=$(port)
  mkdir -p "$home"
  (cd "$BENCH" && exec "$PY" fake_telegram_server.py --port "$tg" > "$WORK/tg-$name.log" 2>&1) & PIDS+=($!)
  (cd "$BENCH" && exec "$PY" fake_llm_server.py --port "$llm" --latency 1.0 > "$WORK/llm-$name.log" 2>&1) & PIDS+=($!)
  sleep 1.5
  printf 'llm:\n  base_url: http://127.0.0.1:%s/v1\n  api_key: sk-bench\n  model: bench-model\nplatforms:\n  telegram:\n    token: "123:abc"\n    base_url: http://127.0.0.1:%s\naccess:\n  dm_policy: open\nhttp:\n  port: 0\n' \
    "$llm" "$tg" > "$home/config.yaml"
  "$PY" -m compileall -q "$root/gateway" "$root/agent" "$root/platforms"  # as an installed package has it
  CHATGATE_HOME=$home "$PY" "$WORK/run_at.py" "$root" > "$WORK/gw-$name.log" 2>&1 & PIDS+=($!)
  echo "$tg $llm $!" > "$WORK/$name.ports"
}
start this "$HERE"
start base "$WORK/base"
sleep 3
drive() {  # name label args...
  local name=$1 label=$2 tg llm pid; shift 2
  read -r tg llm pid < "$WORK/$name.ports"
  (cd "$BENCH" && "$PY" drive.py --tg "http://127.0.0.1:$tg" --llm "http://127.0.0.1:$llm" --gateway-pid "$pid" \
    --quiet --label "$label" --json-out "$WORK/$name-$label.jsonl" "$@" > /dev/null)
}
for name in this base; do drive "$name" warm --chats 100 --msgs-per-chat 1 --warmup 3 --chat-base 100000; done
for i in $(seq 1 "$ROUNDS"); do
  for name in this base; do
    for s in $SCENARIOS; do
      case $s in
        A) drive "$name" A --chats 1 --msgs-per-chat 50 --warmup 2 --llm-latency 0 --chat-base $((300000 + i * 1000)) ;;
        B) drive "$name" B --chats 100 --msgs-per-chat 1 --warmup 0 --llm-latency 1.0 --chat-base $((200000 + i * 1000)) ;;
        C) drive "$name" C --chats 500 --msgs-per-chat 2 --warmup 0 --llm-latency 1.0 --chat-base $((400000 + i * 1000)) ;;
      esac
    done
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); base = $REV ($(git -C "$WORK/base" rev-parse --short HEAD))"
"$PY" - "$WORK" "$SCENARIOS" <<'PYEOF'
import json, statistics, sys
work, scenarios = sys.argv[1], sys.argv[2].split()
def runs(name, label):
    return [json.loads(line) for line in open(f"{work}/{name}-{label}.jsonl")]
def med(values):
    return round(statistics.median(values), 3)
figures = {
    "A reply p50 (ms)": ("A", lambda r: r["latency_s"]["done"]["p50"] * 1000),
    "A reply p99 (ms)": ("A", lambda r: r["latency_s"]["done"]["p99"] * 1000),
    "A CPU per turn (ms)": ("A", lambda r: r["gateway"]["cpu_s"] / r["completed"] * 1000),
    "B all answered (s)": ("B", lambda r: r["wall_s"]),
    "B CPU (s)": ("B", lambda r: r["gateway"]["cpu_s"]),
    "C all answered (s)": ("C", lambda r: r["wall_s"]),
    "C CPU per message (ms)": ("C", lambda r: r["gateway"]["cpu_s"] / r["completed"] * 1000),
}
print(f"{'figure':<22} {'this':>9} {'base':>9} {'ratio':>7}")
for title, (label, get) in figures.items():
    if label not in scenarios:
        continue
    this, base = [get(r) for r in runs("this", label)], [get(r) for r in runs("base", label)]
    ratios = [t / b for t, b in zip(this, base) if b]
    print(f"{title:<22} {med(this):>9} {med(base):>9} {med(ratios):>7}")
missing = sum(r["missing"] + r["duplicates"] for n in ("this", "base") for l in scenarios for r in runs(n, l))
print(f"missing or doubled replies in all runs: {missing}")
PYEOF
