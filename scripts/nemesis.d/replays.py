"""scripts/nemesis.d/replays.py: what an operator or a bug does to the topics
mid-run (issue #55, item 7), once, in a quiet slot of the schedule: both
topics read again (the orders through `seckill-consumer --replay`, every
payment published again as it was, as a replayed topic or an offset reset
delivers it), then a burst of signed payments for order ids no order ever
had. The checker then counts refused orders brought back and payments made
late by the burst; both must be 0. Imported by faults.py and checker.py.
"""
import json
import os
import time

from load import BOOTSTRAP, PAYMENTS_TOPIC, payment_key, payment_sig
from machinery import ROOT

BURST = 2000          # payments for unknown ids, published at once
BURST_QUIET_S = 12    # no fault this long after the burst: a payment late then is the burst's doing


def kcat(c, user, *args, data=None, timeout=300):
    """scripts/stack kcat as USER in the ctl host (the brokers of the HA stack)."""
    return c.in_ctl(os.path.join(ROOT, "scripts", "stack"), "kcat", user, "-b", BOOTSTRAP, *args,
                    check=False, input=data, timeout=timeout)


def replay_orders(c):
    r = c.in_ctl(os.path.join(c.build, "seckill-consumer"), "-c", c.cfg, "--replay", "--from-beginning",
                 check=False, timeout=600)
    total = [ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("total")]
    c.say(f"replay of the orders topic (seckill-consumer --replay --from-beginning): exit {r.returncode}"
          + (f"; {' '.join(total[-1].split())}" if total else ""))
    return r.returncode


def replay_payments(c):
    """Every payment on the topic so far, published again byte for byte, keyed as it was."""
    got = kcat(c, "admin", "-C", "-t", PAYMENTS_TOPIC, "-o", "beginning", "-e", "-q", "-f", "%k|%s\n")
    lines = [ln for ln in got.stdout.splitlines() if "|" in ln and ln.split("|", 1)[1].startswith("{")]
    put = kcat(c, "payment", "-P", "-q", "-t", PAYMENTS_TOPIC, "-K", "|", "-X", "acks=all",
               data="".join(ln + "\n" for ln in lines))
    c.say(f"replay of the payments topic: {len(lines)} payments published again (kcat exit {put.returncode})")
    return len(lines) if put.returncode == 0 else -1


def unknown_ids(c, n):
    """N order ids of the highest block taken that no order has: the block's top (a producer
    hands out its block's ids from the bottom, and the run never uses a million)."""
    out = c.stack("psql", "-d", "seckill", "-At", "-c", "SELECT max(block) FROM order_id_blocks").stdout
    block = int(out.strip().splitlines()[-1])
    return [(block << 20) | ((1 << 20) - 1 - k) for k in range(n)]


def payment_burst(c):
    """BURST signed payments for ids no order has (a replayed foreign topic, a bug in the shop):
    the consumer holds them waiting for orders that never come; real payments must not wait
    behind them. Returns the burst's start in epoch seconds (the history's clock)."""
    key = payment_key()
    now_ms = int(time.time() * 1000)
    lines = []
    for k, oid in enumerate(unknown_ids(c, BURST)):
        user, ref = 1 + k % 5000, f"burst-{k}"
        msg = {"v": 1, "order_id": str(oid), "user_id": user, "paid_at_ms": now_ms, "ref": ref,
               "sig": payment_sig(key, str(oid), user, now_ms, ref)}
        lines.append(f"{user}|{json.dumps(msg, separators=(',', ':'))}\n")
    t0 = time.time()
    r = kcat(c, "payment", "-P", "-q", "-t", PAYMENTS_TOPIC, "-K", "|", "-X", "acks=all", data="".join(lines))
    c.say(f"burst: {BURST} signed payments for order ids no order has (kcat exit {r.returncode}); "
          f"no fault for {BURST_QUIET_S} s")
    return t0


def replays(c, events):
    """The mid-run step: both topics again, then the burst, then a quiet hold."""
    events.append({"t": round(c.t(), 1), "kind": "replays",
                   "orders_replay_exit": replay_orders(c), "payments_replayed": replay_payments(c)})
    events.append({"t": round(c.t(), 1), "kind": "burst", "at": payment_burst(c)})
    time.sleep(BURST_QUIET_S)


def burst_window(events):
    """(start, end) in epoch seconds of the burst's quiet slot, or None when there was none."""
    for e in events:
        if e.get("kind") == "burst":
            return e["at"], e["at"] + BURST_QUIET_S
    return None
