"""scripts/nemesis.d/load.py: the nemesis' buyers (`scripts/nemesis load`,
run in the client host): purchases at a bounded rate, each one written to the
history as it is invoked and again when it ends. Imported by scripts/nemesis.
"""
import http.client
import json
import random
import signal
import threading
import time


# --- the load: buyers, each request recorded -----------------------------------

def load_main(a):
    """Buyers on 127.0.0.1:8080 (the producer's host, published): WORKERS
    threads, at most RATE requests a second in all, each pair (user, item)
    tried once, until a.seconds pass, the pairs run out, or SIGTERM."""
    items = [int(x.split(":")[0]) for x in a.items.split(",")]
    rng = random.Random(a.seed)
    users = a.users
    tried = set()
    lock = threading.Lock()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = open(a.history, "a", buffering=1)
    end = time.monotonic() + a.seconds
    state = {"n": 0, "next": time.monotonic()}

    def next_op():
        with lock:
            if len(tried) >= users * len(items) or time.monotonic() >= end or stop.is_set():
                return None
            while True:
                pair = (rng.randint(1, users), rng.choice(items))
                if pair not in tried:
                    break
            tried.add(pair)
            state["n"] += 1
            # the rate bound: one start every 1/RATE s
            state["next"] = max(state["next"] + 1.0 / a.rate, time.monotonic())
            return state["n"], pair, state["next"]

    def record(**kw):
        with lock:
            out.write(json.dumps(kw) + "\n")

    def worker():
        while True:
            op = next_op()
            if op is None:
                return
            n, (user, item), at = op
            time.sleep(max(0.0, at - time.monotonic()))
            record(op=n, type="invoke", user=user, item=item, t=time.time())
            typ, status, body = request(user, item, a.timeout)
            rec = dict(op=n, type=typ, user=user, item=item, status=status, t=time.time())
            if typ == "ok":
                rec["order_id"] = body.get("order_id")
            elif typ == "fail":
                rec["why"] = body.get("status")
            else:
                rec["why"] = body.get("status") if isinstance(body, dict) else body
            record(**rec)

    threads = [threading.Thread(target=worker) for _ in range(a.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()
    return 0


def request(user, item, timeout):
    """One purchase: ("ok"|"fail"|"info", HTTP status or None, body or error)."""
    conn = http.client.HTTPConnection("127.0.0.1", 8080, timeout=timeout)
    try:
        conn.request("POST", "/api/v1/seckill", json.dumps({"item_id": item, "user_id": user}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
    except (OSError, http.client.HTTPException) as e:
        return "info", None, type(e).__name__
    finally:
        conn.close()
    try:
        body = json.loads(raw)
    except ValueError:
        body = {"status": raw[:80].decode("utf-8", "replace")}
    if r.status == 202 and str(body.get("order_id", "")).isdigit():
        return "ok", r.status, body
    if 400 <= r.status < 500:
        return "fail", r.status, body
    # a 5xx (503 unknown, unavailable), or a 202 without an order id: unknown
    return "info", r.status, body
