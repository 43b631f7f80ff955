"""scripts/nemesis.d/checker.py: the nemesis' checker: after the last heal,
wait until the sale settles, then hold the history the buyers wrote against
the orders PostgreSQL kept (lost, duplicated, oversold, unexpected,
recovered) and seckillctl reconcile. Imported by scripts/nemesis.
"""
import json
import re
import time


# --- the checker ----------------------------------------------------------------

def read_history(path):
    ops = {}
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if e["type"] == "invoke":
                ops[e["op"]] = dict(e, type="info", why="no answer recorded")
            else:
                ops[e["op"]] = e
    return list(ops.values())


def check(c, items, history):
    """Lost, duplicated, oversold, unexpected, recovered (docs/testing.md)."""
    ops = read_history(history)
    ok = {str(o["order_id"]): o for o in ops if o["type"] == "ok"}
    info_pairs = {(o["user"], o["item"]) for o in ops if o["type"] == "info"}
    ids = ",".join(str(i) for i, _ in items)
    rows = c.stack("psql", "-d", "seckill", "-At", "-F", " ", "-c",
                   f"SELECT order_id, user_id, item_id FROM orders WHERE item_id IN ({ids})"
                   ).stdout.split("\n")
    orders = [r.split() for r in rows if r.strip()]
    persisted = {o[0] for o in orders}
    per_pair, per_item = {}, {}
    for oid, user, item in orders:
        per_pair.setdefault((int(user), int(item)), []).append(oid)
        per_item[int(item)] = per_item.get(int(item), 0) + 1
    lost = sorted(set(ok) - persisted)
    duplicated = sorted((p, v) for p, v in per_pair.items() if len(v) > 1)
    oversold = {i: per_item.get(i, 0) - s for i, s in items if per_item.get(i, 0) > s}
    recovered, unexpected = [], []
    for oid, user, item in orders:
        if oid in ok:
            continue
        (recovered if (int(user), int(item)) in info_pairs else unexpected).append(oid)
    rec = c.ctl("reconcile", check=False)
    why = {}  # the info answers by what they were: "503 unknown", "None TimeoutError" ...
    for o in ops:
        if o["type"] == "info":
            k = f"{o.get('status')} {o.get('why')}"
            why[k] = why.get(k, 0) + 1
    return {
        "accepted": len(ok), "persisted": len(orders), "lost": len(lost),
        "duplicated": sum(len(v) - 1 for _, v in duplicated), "oversold": sum(oversold.values()),
        "unexpected": len(unexpected), "info": sum(1 for o in ops if o["type"] == "info"),
        "recovered": len(recovered), "failed": sum(1 for o in ops if o["type"] == "fail"),
        "reconcile": "clean" if rec.returncode == 0 else "dirty", "info_why": why,
        "evidence": {"lost": lost[:50], "duplicated": [[list(p), v] for p, v in duplicated[:50]],
                     "oversold": {str(k): v for k, v in oversold.items()}, "unexpected": unexpected[:50],
                     "reconcile": rec.stdout[-4000:]},
    }


def settle(c, items, seconds):
    """After the last heal: until no item has a reservation pending or
    unpublished in Redis and the orders stop changing, or SECONDS pass."""
    end = time.monotonic() + seconds
    last, same_since = None, time.monotonic()
    while time.monotonic() < end:
        pending = 0
        for i, _ in items:
            out = c.ctl("item", "show", str(i), check=False).stdout
            m = re.search(r"pending (\d+), unpublished (\d+)", out)
            pending += int(m.group(1)) + int(m.group(2)) if m else 1
        n = c.stack("psql", "-d", "seckill", "-At", "-c", "SELECT count(*) FROM orders", check=False).stdout
        if n != last:
            last, same_since = n, time.monotonic()
        if pending == 0 and time.monotonic() - same_since >= 3:
            c.say(f"settled: nothing pending in Redis, {n.strip()} orders")
            return True
        time.sleep(1)
    c.say(f"not settled within {seconds} s (pending {pending}); checking what there is")
    return False
