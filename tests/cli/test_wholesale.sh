#!/usr/bin/env bash
# tests/cli/test_wholesale.sh [BUILD_DIR]: the arithmetic bench/wholesale
# turns its samples into figures with, on samples made here: the sale's
# window (from the scrape before the first 202 to the first that saw the
# last), a percentile from the producer's histogram between two scrapes, a
# process's CPU at a time between two samples, a process tree's CPU with a
# child that exited (its time counted through the parent) or went while the
# tree was read, and the floors' sum (null while one floor is missing) and
# PostgreSQL's over its two rows' floors. The sale itself is `make bench`'s.
# Needs no build, no stack; python3 only. Speaks TAP. (BUILD_DIR is unused.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

python3 - <<'PY'
import importlib.machinery, importlib.util, os, subprocess, sys, time
sys.dont_write_bytecode = True  # no __pycache__ beside bench/wholesale

loader = importlib.machinery.SourceFileLoader("wholesale", "bench/wholesale")
spec = importlib.util.spec_from_loader("wholesale", loader)
ws = importlib.util.module_from_spec(spec)
loader.exec_module(ws)

sys.path.insert(0, "tests")
from tap import Tap  # noqa: E402
tap = Tap()
print("1..10")

check = tap.check


def row(t, acc, le1, le10, le100):
    return {"t_ms": t, "req_accepted": acc, "lat_le_0.001": le1, "lat_le_0.01": le10,
            "lat_le_0.1": le100, "lat_le_+Inf": le100}


rows = [row(0, 0, 0, 0, 0), row(100, 0, 0, 0, 0), row(200, 5, 50, 99, 100), row(300, 10, 60, 120, 130),
        row(400, 10, 70, 130, 140)]
a, b = ws.window(rows)
check("the window runs from the last scrape before the first 202 to the first that saw the last",
      (a["t_ms"], b["t_ms"]), (100, 300))
check("nothing accepted: no window", ws.window([row(0, 0, 0, 0, 0), row(100, 0, 0, 0, 0)]), None)
# Between scrapes 1 and 2: 50 answers within 1 ms, 49 within 10 ms, 1 within 100 ms.
check("p50 and p99 from the histogram's difference between two scrapes",
      (ws.quantile(rows[1], rows[2], 0.5), ws.quantile(rows[1], rows[2], 0.99)), (1.0, 10.0))
samples = [{"t": 10.0, "producer": 0.0}, {"t": 11.0, "producer": 1000.0}, {"t": 12.0, "producer": 1500.0}]
check("a process's CPU between two samples is interpolated; outside them, the nearest",
      (ws.cpu_at(samples, "producer", 10.5), ws.cpu_at(samples, "producer", 11.5),
       ws.cpu_at(samples, "producer", 20.0)), (500.0, 1250.0, 1500.0))

# A child that burns 0.3 s of CPU and is reaped: its time stays in the tree.
before = ws.tree_ticks(os.getpid())
subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                "while time.process_time() - t < 0.3: pass"], check=True)
grown = (ws.tree_ticks(os.getpid()) - before) / ws.TCK
check("a process tree's CPU keeps a child's time after it exited (>= 0.25 s of 0.3)", grown >= 0.25, True)

# A child reaped while the tree is read (seen in the first list of children,
# gone from the second): counted in neither its file nor the parent's yet,
# or in both, so the tree is read again until the children stay.
real_children, real_ticks = ws.children, ws.proc_ticks
lists = iter([{7}, set(), set(), set()])
ws.children = lambda pid: next(lists)
ws.proc_ticks = lambda pid, children=False: 5 if pid == 7 else 100
check("a child gone while the tree is read: read again, counted once (through the parent)",
      ws.tree_ticks(1), 100)
ws.children, ws.proc_ticks = real_children, real_ticks

floors = {"cpu_us_per_accepted_producer": "100", "drain_consumer_cpu_us_per_order": "20",
          "kafka_limit_broker_cpu_us_per_msg": "2", "pg_batch_cpu_us_per_row": "18",
          "redis_script_cpu_us_floor": "40", "lock_batch_redis_cpu_us_per_op": "12",
          "lock_redislock_redis_cpu_us_per_op": "50", "ingress_rps": "8000"}
cpu = {"producer": 150.0, "consumer": 30.0, "redis": 104.0, "kafka": 20.0, "postgres": 36.0,
       "machine": 760.0, "sold_per_s": 4000}
f = ws.floor_figures(floors, cpu)
check("the floors' sum (Redis: the reservation and the least lock) and each part over its floor",
      (f["sale_floor_cpu_us"], f["sale_floor_redis_lock_us"], f["sale_machine_over_floor"],
       f["sale_part_over_floor"]["redis"], f["sale_sold_per_s_over_accepted_path"]),
      (192.0, 12.0, 3.96, 2.0, 0.5))
check("no fence floor: no figure over both PostgreSQL floors", f["sale_pg_over_floors"], None)
floors["pg_fence_cpu_us_per_row"] = "12"
f = ws.floor_figures(floors, cpu)
check("PostgreSQL over both rows' floors (the order's 18 and the fence's 12)",
      (f["sale_pg_over_floors"], f["sale_floor_pg_fence_us"]), (1.2, 12.0))
del floors["pg_batch_cpu_us_per_row"]
check("a floor missing: no sum", ws.floor_figures(floors, cpu)["sale_floor_cpu_us"], None)
sys.exit(tap.status())
PY
