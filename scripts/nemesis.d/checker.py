"""scripts/nemesis.d/checker.py: the nemesis' checker: after the last heal,
wait until the sale settles (nothing pending in Redis, every payment window
passed, every return done), then hold the history the load wrote against
what PostgreSQL and Redis kept (lost, duplicated, oversold, unexpected,
recovered; after the sale: returned twice, not returned, payments lost, paid
resold) and seckillctl reconcile. Imported by scripts/nemesis.
"""
import json
import re
import time

from replays import burst_window

HOLDING = ("final", "pending_payment", "paid")  # the statuses that hold a unit


# --- the history -----------------------------------------------------------------

def read_history(path):
    """Every op, its last line: ok, fail or info (an invoke without an end is
    info). f is what it was: buy (also a line without f), pay, cancel."""
    ops = {}
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            e.setdefault("f", "buy")
            if e["type"] == "invoke":
                ops[e["op"]] = dict(e, type="info", why="no answer recorded")
            else:
                ops[e["op"]] = e
    return list(ops.values())


def by_type(ops, f):
    out = {"ok": [], "fail": [], "info": []}
    for o in ops:
        if o["f"] == f:
            out[o["type"]].append(o)
    return out


# --- what the stores kept ----------------------------------------------------------

def query(c, sql):
    out = c.stack("psql", "-d", "seckill", "-At", "-F", "|", "-c", sql).stdout
    return [r.split("|") for r in out.split("\n") if r.strip()]


def stores(c, items):
    ids = ",".join(str(i) for i, _ in items)
    orders = {r[0]: {"user": int(r[1]), "item": int(r[2]), "status": r[3], "reason": r[4]}
              for r in query(c, "SELECT order_id, user_id, item_id, status, coalesce(status_reason, '') "
                                f"FROM orders WHERE item_id IN ({ids})")}
    returns = {}
    for oid, reason, done in query(c, "SELECT order_id, reason, done_at IS NOT NULL FROM order_returns "
                                      f"WHERE item_id IN ({ids})"):
        returns.setdefault(oid, []).append((reason, done == "t"))
    late = {(r[0], r[1]): r[2] for r in query(
        c, f"SELECT l.order_id, l.ref, l.status_then FROM late_payments l JOIN orders o USING (order_id) "
           f"WHERE o.item_id IN ({ids})")}
    left = {int(r[0]): int(r[1]) for r in query(
        c, f"SELECT item_id, stock_left FROM items WHERE item_id IN ({ids})")}
    redis = {}
    for i, _ in items:
        # (an item in buckets: every slot's stock, the reserve's and the buckets')
        out = c.ctl("item", "show", str(i), check=False).stdout
        m = re.search(r"all slots +stock (-?\d+)", out) or re.search(r"redis +stock (-?\d+)", out)
        redis[i] = int(m.group(1)) if m else None
    return orders, returns, late, left, redis


# --- the checks ------------------------------------------------------------------

def check_buys(ops, orders, items):
    """Lost, duplicated, oversold, unexpected, recovered (docs/testing.md)."""
    buys = by_type(ops, "buy")
    ok = {str(o["order_id"]): o for o in buys["ok"]}
    info_pairs = {(o["user"], o["item"]) for o in buys["info"]}
    per_pair, holding = {}, {}
    for oid, o in orders.items():
        per_pair.setdefault((o["user"], o["item"]), []).append(oid)
        if o["status"] in HOLDING:
            holding[o["item"]] = holding.get(o["item"], 0) + 1
    # each pair (user, item) is tried once, so two orders of a pair are a
    # duplicate even when one of them expired
    duplicated = sorted((p, v) for p, v in per_pair.items() if len(v) > 1)
    oversold = {i: holding.get(i, 0) - s for i, s in items if holding.get(i, 0) > s}
    recovered, unexpected = [], []
    for oid, o in orders.items():
        if oid not in ok:
            (recovered if (o["user"], o["item"]) in info_pairs else unexpected).append(oid)
    return {"ok": ok, "holding": holding, "lost": sorted(set(ok) - set(orders)), "duplicated": duplicated,
            "oversold": oversold, "recovered": recovered, "unexpected": unexpected, "buys": buys}


def check_after(ops, orders, returns, late, left, redis, items, holding):
    """After the sale: every unit back on sale exactly once, no payment lost,
    no paid unit sold again (docs/testing.md, "The nemesis")."""
    pays, cancels = by_type(ops, "pay"), by_type(ops, "cancel")
    paid_for = {str(o["order_id"]) for t in pays.values() for o in t}
    cancelled_for = {str(o["order_id"]) for t in cancels.values() for o in t}
    ev = {"returned_twice": [], "not_returned": [], "payments_lost": [], "paid_resold": [],
          "unasked": []}
    for oid, rs in returns.items():
        if len(rs) > 1:
            ev["returned_twice"].append(oid)
    for oid, o in orders.items():
        back = oid in returns
        if o["status"] in ("expired", "cancelled") and not back:
            ev["not_returned"].append(oid)
        if o["status"] == "paid" and back:
            ev["paid_resold"].append(oid)
        if o["status"] in HOLDING and back and o["status"] != "paid":
            ev["returned_twice"].append(oid)  # given back while it still holds its unit
        # a state nobody asked for: paid without a payment, cancelled without a cancel
        if (o["status"] == "paid" and oid not in paid_for) or (o["status"] == "cancelled"
                                                              and oid not in cancelled_for):
            ev["unasked"].append(oid)
    for p in pays["ok"]:
        o = orders.get(str(p["order_id"]))
        applied = o is not None and o["status"] == "paid" and o["reason"] == f"paid {p['ref']}"
        if not applied and (str(p["order_id"]), p["ref"]) not in late:
            ev["payments_lost"].append(p["order_id"])
    units = {"returned_twice": 0, "not_returned": 0, "paid_resold": 0}
    per_item = {}
    for i, s in items:
        h, sl, rs = holding.get(i, 0), left.get(i), redis.get(i)
        per_item[str(i)] = {"stock": s, "orders": sum(1 for o in orders.values() if o["item"] == i),
                            "holding": h, "stock_left": sl, "redis": rs}
        # PostgreSQL: stock_left + the orders holding a unit = stock; more is
        # a unit given back twice, less one never given back
        if sl is not None:
            units["returned_twice"] += max(0, sl + h - s)
            units["not_returned"] += max(0, s - sl - h)
        # Redis, once every return is done: its stock is stock_left
        if rs is not None and sl is not None:
            units["returned_twice"] += max(0, rs - sl)
            units["not_returned"] += max(0, sl - rs)
        units["paid_resold"] += max(0, h - s)
    # the late payments by what their orders were then, and by what the
    # payer meant (at once, near pay_by, with a cancel)
    late_then, late_fate = {}, {}
    for p in pays["ok"] + pays["info"]:
        then = late.get((str(p["order_id"]), p["ref"]))
        if then is not None:
            late_then[then] = late_then.get(then, 0) + 1
            late_fate[p.get("fate")] = late_fate.get(p.get("fate"), 0) + 1
    status = {}
    for o in orders.values():
        status[o["status"]] = status.get(o["status"], 0) + 1
    return {
        "payments": len(pays["ok"]), "payments_info": len(pays["info"]), "cancels": len(cancels["ok"]),
        "cancels_refused": len(cancels["fail"]), "cancels_info": len(cancels["info"]),
        "cancels_why": count_why(cancels["fail"] + cancels["info"]),
        "expired": status.get("expired", 0), "paid": status.get("paid", 0),
        "cancelled": status.get("cancelled", 0), "late_payments": len(late), "late_then": late_then,
        "late_by_plan": late_fate, "statuses": status,
        "returned_twice": len(ev["returned_twice"]) + units["returned_twice"],
        "not_returned": len(ev["not_returned"]) + units["not_returned"],
        "payments_lost": len(ev["payments_lost"]),
        "paid_resold": len(ev["paid_resold"]) + units["paid_resold"],
        "unasked": len(ev["unasked"]), "per_item": per_item,
        "after_evidence": dict({k: v[:50] for k, v in ev.items()}, units=units),
    }


def check_replays(c, ops, late, items, events):
    """Issue #55, item 7: refused orders brought back by the replays (an order id both refused
    and persisted for the same buyer), and payments made late by the burst (paid at once, in
    the burst's quiet slot, and still recorded late: the burst held them past their window)."""
    ids = ",".join(str(i) for i, _ in items)
    back = [r[0] for r in query(c, "SELECT o.order_id FROM orders o JOIN order_rejections r ON "
                                   "r.order_id = o.order_id AND r.user_id = o.user_id AND r.item_id = o.item_id "
                                   f"WHERE o.item_id IN ({ids})")]
    window, late_by_burst = burst_window(events), []
    if window:
        for p in by_type(ops, "pay")["ok"]:
            if (p.get("fate") == "pay" and window[0] <= p["t"] <= window[1]
                    and (str(p["order_id"]), p["ref"]) in late):
                late_by_burst.append(p["order_id"])
    return {"refused_back": len(back), "late_by_burst": len(late_by_burst), "burst": bool(window),
            "replay_evidence": {"refused_back": back[:50], "late_by_burst": late_by_burst[:50]}}


def count_why(ops):
    why = {}
    for o in ops:
        k = f"{o.get('status')} {o.get('why')}"
        why[k] = why.get(k, 0) + 1
    return why


def check(c, items, history, events):
    ops = read_history(history)
    orders, returns, late, left, redis = stores(c, items)
    b = check_buys(ops, orders, items)
    a = check_after(ops, orders, returns, late, left, redis, items, b["holding"])
    rp = check_replays(c, ops, late, items, events)
    rec = c.ctl("reconcile", check=False)
    buys = b["buys"]
    r = {
        "accepted": len(b["ok"]), "persisted": len(orders), "lost": len(b["lost"]),
        "duplicated": sum(len(v) - 1 for _, v in b["duplicated"]), "oversold": sum(b["oversold"].values()),
        # (a paid or cancelled order nobody paid or cancelled is unexpected too)
        "unexpected": len(b["unexpected"]) + a["unasked"], "info": len(buys["info"]),
        "recovered": len(b["recovered"]), "failed": len(buys["fail"]),
        "reconcile": "clean" if rec.returncode == 0 else "dirty",
        # the info answers by what they were: "503 unknown", "None TimeoutError" ...
        "info_why": count_why(buys["info"]),
        "evidence": {"lost": b["lost"][:50], "duplicated": [[list(p), v] for p, v in b["duplicated"][:50]],
                     "oversold": {str(k): v for k, v in b["oversold"].items()},
                     "unexpected": b["unexpected"][:50], "reconcile": rec.stdout[-4000:]},
    }
    r["evidence"].update(a.pop("after_evidence"))
    r["evidence"].update(rp.pop("replay_evidence"))
    r.update(a)
    r.update(rp)
    return r


# --- the settle ------------------------------------------------------------------

def settle(c, items, seconds):
    """After the last heal: until no item has a reservation pending or
    unpublished in Redis, no order waits for its payment (every window
    passed and the expiry ran), every return reached Redis, and the orders
    and the payments stop changing; or SECONDS pass."""
    end = time.monotonic() + seconds
    ids = ",".join(str(i) for i, _ in items)
    last, same_since = None, time.monotonic()
    sql = ("SELECT (SELECT count(*) FROM orders WHERE item_id IN ({0})), "
           "(SELECT count(*) FROM orders WHERE item_id IN ({0}) AND status = 'pending_payment'), "
           "(SELECT count(*) FROM order_returns WHERE item_id IN ({0}) AND done_at IS NULL), "
           "(SELECT count(*) FROM orders WHERE item_id IN ({0}) AND status = 'paid'), "
           "(SELECT count(*) FROM late_payments)").format(ids)
    pending, waiting = None, None
    while time.monotonic() < end:
        pending = 0
        for i, _ in items:
            out = c.ctl("item", "show", str(i), check=False).stdout
            m = re.search(r"pending (\d+), unpublished (\d+)", out)
            pending += int(m.group(1)) + int(m.group(2)) if m else 1
        n = c.stack("psql", "-d", "seckill", "-At", "-F", " ", "-c", sql, check=False).stdout.strip()
        if n != last:
            last, same_since = n, time.monotonic()
        f = n.split()
        waiting = int(f[1]) + int(f[2]) if len(f) == 5 else 1
        if pending == 0 and waiting == 0 and time.monotonic() - same_since >= 3:
            c.say(f"settled: nothing pending in Redis, no order waiting for its payment, every return "
                  f"done; orders, pending, returns waiting, paid, late payments: {n}")
            return True
        time.sleep(1)
    c.say(f"not settled within {seconds} s (pending in Redis {pending}, orders waiting for a payment "
          f"or a return {waiting}); checking what there is")
    return False
