"""scripts/nemesis.d/load.py: the nemesis' workload (`scripts/nemesis load`,
run in the client host): buyers at a bounded rate, and after the sale a
payer (Kafka user payment) and a canceller (the producer's cancel call) for a
share of the orders they got; every request is written to the history as it
is invoked and again when it ends. Imported by scripts/nemesis.
"""
import hashlib
import heapq
import hmac
import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time

from machinery import ENGINES, ROOT, STATE

# What becomes of an accepted order (the rest expire): paid at once, paid
# near its pay_by (racing the expiry: some land after it and become late
# payments), cancelled by its buyer, or cancelled and paid at about the
# same instant (which wins is PostgreSQL's to say).
FATES = [("pay", 0.30), ("pay-late", 0.15), ("cancel", 0.15), ("cancel+pay", 0.05)]
BOOTSTRAP = ",".join(f"127.0.0.1:{ENGINES[f'kafka3-{n}'][1][0]}" for n in (1, 2, 3))
PAYMENTS_TOPIC = "seckill.payments"  # config/seckill-ha.cfg's kafka.payments_topic
# The key the shop's payment service signs payments with (kafka.payment_keys
# "p1:payment-key-1" of config/seckill-ha.cfg, in the nemesis' state folder):
# the consumer applies no payment it did not sign.
PAYMENT_KEY = os.path.join(STATE, "secrets", "payment-key-1")


def payment_sig(key, order_id, user, paid_at_ms, ref):
    """The payment's "sig" (common/sale/paysig.h): p1:HMAC-SHA256 of its text."""
    text = f"seckill-payment-v1\n{order_id}\n{user}\n{paid_at_ms}\n{ref}\n"
    return "p1:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def payment_key():
    """The key file's bytes, one trailing newline excluded (as the consumer reads it)."""
    with open(PAYMENT_KEY, "rb") as f:
        key = f.read()
    return key[:-2] if key.endswith(b"\r\n") else key[:-1] if key.endswith(b"\n") else key


class History:
    """The history file and the op numbers: one line per invoke and per end."""

    def __init__(self, path):
        self.out = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.n = 0

    def next_op(self):
        with self.lock:
            self.n += 1
            return self.n

    def record(self, **kw):
        with self.lock:
            self.out.write(json.dumps(kw) + "\n")


class After:
    """The after-sale queue: (when, seq, kind, order) in time order, served
    by the payer and the cancellers until it is empty after the stop."""

    def __init__(self):
        self.heap = {"pay": [], "cancel": []}
        self.cond = threading.Condition()
        self.seq = 0
        self.closed = False

    def put(self, kind, at, order):
        with self.cond:
            self.seq += 1
            heapq.heappush(self.heap[kind], (at, self.seq, order))
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def take_due(self, kind, most):
        """Up to MOST entries of KIND that are due, waiting for the first;
        [] once closed and empty."""
        with self.cond:
            while True:
                h = self.heap[kind]
                now = time.monotonic()
                if h and h[0][0] <= now:
                    out = []
                    while h and h[0][0] <= now and len(out) < most:
                        out.append(heapq.heappop(h)[2])
                    return out
                if not h and self.closed:
                    return []
                self.cond.wait(min(0.5, h[0][0] - now) if h else 0.5)


def load_main(a):
    """Buyers on 127.0.0.1:8080 (the producer's host, published): WORKERS
    threads, at most RATE requests a second in all, each pair (user, item)
    tried once, until a.seconds pass, the pairs run out, or SIGTERM; beside
    them the payer and the cancellers, who finish what is due after it."""
    items = [int(x.split(":")[0]) for x in a.items.split(",")]
    rng = random.Random(a.seed)
    fate_rng = random.Random(a.seed + 1)
    users = a.users
    tried = set()
    lock = threading.Lock()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    hist = History(a.history)
    after = After()
    end = time.monotonic() + a.seconds
    state = {"next": time.monotonic()}

    def next_op():
        with lock:
            if len(tried) >= users * len(items) or time.monotonic() >= end or stop.is_set():
                return None
            while True:
                pair = (rng.randint(1, users), rng.choice(items))
                if pair not in tried:
                    break
            tried.add(pair)
            # the rate bound: one start every 1/RATE s
            state["next"] = max(state["next"] + 1.0 / a.rate, time.monotonic())
            return hist.next_op(), pair, state["next"]

    def plan(order):
        """What becomes of an accepted order, drawn now (the bought moment)."""
        with lock:
            x, fate, acc = fate_rng.random(), "expire", 0.0
            for f, share in FATES:
                acc += share
                if x < acc:
                    fate = f
                    break
            soon = fate_rng.uniform(0.1, 1.0)
            late = fate_rng.uniform(-1.0, 0.5)
            whenc = fate_rng.uniform(0.2, 0.7 * a.pay_within)
            # (a payment takes about half a second more to reach the
            # consumer than a cancel, kcat's start: the cancel of a pair
            # goes 0-1 s after its payment, so either may win)
            race = fate_rng.uniform(0.0, 1.0)
        now = time.monotonic()
        order["fate"] = fate
        if fate == "pay":
            after.put("pay", now + soon, order)
        elif fate == "pay-late":
            # pay_by is the persisted time + the window: a little after the
            # 202, so "late" here lands from a second before it to just after
            after.put("pay", now + a.pay_within + late, order)
        elif fate == "cancel":
            after.put("cancel", now + whenc, order)
        elif fate == "cancel+pay":
            after.put("pay", now + whenc, order)
            after.put("cancel", now + whenc + race, order)

    def buyer():
        while True:
            op = next_op()
            if op is None:
                return
            n, (user, item), at = op
            time.sleep(max(0.0, at - time.monotonic()))
            hist.record(op=n, f="buy", type="invoke", user=user, item=item, t=time.time())
            typ, status, body = request(user, item, a.timeout)
            rec = dict(op=n, f="buy", type=typ, user=user, item=item, status=status, t=time.time())
            if typ == "ok":
                rec["order_id"] = body.get("order_id")
            elif typ == "fail":
                rec["why"] = body.get("status")
            else:
                rec["why"] = body.get("status") if isinstance(body, dict) else body
            hist.record(**rec)
            if typ == "ok" and a.pay_within > 0:
                plan({"user": user, "item": item, "order_id": str(body["order_id"])})

    def payer():
        while True:
            batch = after.take_due("pay", 200)
            if not batch:
                return
            pay_batch(hist, batch, a.timeout)

    def canceller():
        while True:
            got = after.take_due("cancel", 1)
            if not got:
                return
            cancel_one(hist, got[0], a.timeout)

    buyers = [threading.Thread(target=buyer) for _ in range(a.workers)]
    others = [threading.Thread(target=payer)] + [threading.Thread(target=canceller) for _ in range(2)]
    for t in buyers + others:
        t.start()
    for t in buyers:
        t.join()
    # the buyers are done: what is planned still happens (all of it due
    # within the payment window), then the payer and the cancellers return
    after.close()
    for t in others:
        t.join()
    hist.out.close()
    return 0


def pay_batch(hist, batch, timeout):
    """Publish the payments of BATCH in one kcat run as Kafka user payment,
    keyed by user id. kcat exits 0 only when every message was acknowledged
    (acks=all): then each is ok; otherwise each is info (some may be on the
    topic). It is never fail: a payment the broker refused may still be
    there after a retry inside librdkafka."""
    lines, ops = [], []
    key = payment_key()
    for o in batch:
        n = hist.next_op()
        ref = f"nemesis-{n}"
        paid_at_ms = int(time.time() * 1000)
        msg = json.dumps({"v": 1, "order_id": o["order_id"], "user_id": o["user"],
                          "paid_at_ms": paid_at_ms, "ref": ref,
                          "sig": payment_sig(key, o["order_id"], o["user"], paid_at_ms, ref)},
                         separators=(",", ":"))
        lines.append(f"{o['user']}|{msg}\n")
        ops.append((n, o, ref))
        hist.record(op=n, f="pay", type="invoke", user=o["user"], item=o["item"], order_id=o["order_id"],
                    ref=ref, fate=o["fate"], t=time.time())
    try:
        r = subprocess.run([os.path.join(ROOT, "scripts", "stack"), "kcat", "payment", "-q", "-P",
                            "-b", BOOTSTRAP, "-t", PAYMENTS_TOPIC, "-K", "|",
                            "-X", "acks=all", "-X", "message.timeout.ms=10000"],
                           input="".join(lines), text=True, capture_output=True, timeout=timeout + 20)
        if r.returncode == 0:
            typ, why = "ok", None
        else:
            typ, why = "info", (r.stderr.strip() or f"exit {r.returncode}")[-200:]
    except subprocess.TimeoutExpired:
        typ, why = "info", "kcat timed out"
    for n, o, ref in ops:
        hist.record(op=n, f="pay", type=typ, user=o["user"], item=o["item"], order_id=o["order_id"],
                    ref=ref, fate=o["fate"], why=why, batch=len(ops), t=time.time())


def cancel_one(hist, o, timeout):
    """The buyer's cancel (auth "none": the owner names itself, ?user_id=)."""
    n = hist.next_op()
    hist.record(op=n, f="cancel", type="invoke", user=o["user"], item=o["item"], order_id=o["order_id"],
                fate=o["fate"], t=time.time())
    typ, status, body = call("POST", f"/api/v1/orders/{o['order_id']}/cancel?user_id={o['user']}", b"",
                             timeout)
    if typ == "ok" and status != 202:
        typ = "info"
    rec = dict(op=n, f="cancel", type=typ, user=o["user"], item=o["item"], order_id=o["order_id"],
               fate=o["fate"], status=status, t=time.time())
    rec["why"] = body.get("status") if isinstance(body, dict) else body
    hist.record(**rec)


def call(method, path, body, timeout):
    """One request: ("ok" (2xx) | "fail" (4xx) | "info" (no answer, a 5xx),
    HTTP status or None, the JSON body or the error's name)."""
    conn = http.client.HTTPConnection("127.0.0.1", 8080, timeout=timeout)
    try:
        conn.request(method, path, body,
                     {"Content-Type": "application/json", "Content-Length": str(len(body))})
        r = conn.getresponse()
        raw = r.read()
    except (OSError, http.client.HTTPException) as e:
        return "info", None, type(e).__name__
    finally:
        conn.close()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = {"status": raw[:80].decode("utf-8", "replace")}
    if not isinstance(parsed, dict):
        parsed = {"status": str(parsed)[:80]}
    if 200 <= r.status < 300:
        return "ok", r.status, parsed
    if 400 <= r.status < 500:
        return "fail", r.status, parsed
    return "info", r.status, parsed


def request(user, item, timeout):
    """One purchase: ("ok"|"fail"|"info", HTTP status or None, body or error)."""
    typ, status, body = call("POST", "/api/v1/seckill",
                             json.dumps({"item_id": item, "user_id": user}).encode(), timeout)
    if typ == "ok" and not (status == 202 and str(body.get("order_id", "")).isdigit()):
        # a 2xx other than a 202 with an order id: unknown
        typ = "info"
    return typ, status, body
