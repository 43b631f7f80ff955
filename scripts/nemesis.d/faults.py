"""scripts/nemesis.d/faults.py: the nemesis' faults (partitions, one-way
loss, pauses, skewed clocks, kills) and the schedule that draws them from the
seed: fault, hold, heal, settle. Imported by scripts/nemesis.
"""
import os
import signal
import time

from machinery import (BROKERS, DOWN_AFTER_MS, LOCK_TTL_MS, RCLUSTER_HOSTS, RCLUSTER_NODE_TIMEOUT_MS,
                       REDIS_SERVICE_OF_HOST, SENTINELS)
from replays import replays

KINDS = ["partitions", "netem", "pauses", "clocks", "kills"]


# --- the faults ---------------------------------------------------------------
# Each fault is applied, held, then healed by the function it returns; the
# schedule prints what it does. Links are named (A, [B...]): A from each B.

def redis_victim(c, rng):
    """The Redis primary a fault strikes: the HA stack's one, or one of the
    Cluster's, drawn (with buckets, each serves some of a hot item's)."""
    return rng.choice(c.redis_primaries()) if c.cluster else c.redis_primary()


def redis_service(c, host):
    """scripts/stack's name of the Redis on host."""
    return f"rcluster-{host[2:]}" if c.cluster else REDIS_SERVICE_OF_HOST[host]


def links(c, rng):
    """The links the issue names, by name: (sides A, sides B) cut both ways."""
    p = redis_victim(c, rng)
    if c.cluster:
        # the primary's replica and the other primaries, which vote it out
        others, redis_hosts = [h for h in RCLUSTER_HOSTS if h != p], RCLUSTER_HOSTS
    else:
        others, redis_hosts = SENTINELS + ["redis2" if p == "redis1" else "redis1"], ["redis1", "redis2"]
    k = rng.choice(BROKERS)
    return {
        # split brain: the Redis primary, with the producer, cut off from the
        # Sentinels and the replica (they elect the replica; the old primary
        # keeps taking the producer's writes, which WAIT must refuse); on the
        # Cluster, from every other node
        "redis-split-brain": ([p, "prod"], others),
        "consumer-postgres": (["cons"], ["pg1", "pg2"]),
        "consumer-redis": (["cons"], redis_hosts),
        # a broker cut from the two others: the leader of its partitions
        # loses its in-sync replicas
        f"{k}-from-brokers": ([k], [b for b in BROKERS if b != k]),
        "producer-kafka": (["prod"], BROKERS),
    }


def fault_partition(c, rng):
    name, (a, b) = rng.choice(sorted(links(c, rng).items()))
    for x in a:
        for y in b:
            c.hosts("cut", x, y)
    c.say(f"partition {name}: cut {' '.join(a)} | {' '.join(b)}")
    return lambda: c.hosts("heal")


def fault_loss(c, rng):
    name, (a, b) = rng.choice(sorted(links(c, rng).items()))
    pct = rng.randint(20, 70)
    if rng.random() < 0.5:
        a, b, way = b, a, "reverse"
    else:
        way = "forward"
    for x in a:
        for y in b:
            c.hosts("loss", x, y, str(pct))
    c.say(f"netem {name} ({way}): {pct} % of what {' '.join(a)} sends to {' '.join(b)} lost, one way "
          f"(no delay: this kernel has no netem)")
    return lambda: c.hosts("heal")


def fault_pause(c, rng):
    what = rng.choice(["consumer", "producer", "redis-primary"])
    if what == "redis-primary":
        # past the Sentinels' down-after, or the Cluster's failover (about
        # two node timeouts)
        host = redis_victim(c, rng)
        down_ms = 2 * RCLUSTER_NODE_TIMEOUT_MS if c.cluster else DOWN_AFTER_MS
        pid, hold = c.pid_of(redis_service(c, host)), (down_ms + 3000) / 1000
    else:
        pid = c.procs[what].pid
        hold = (LOCK_TTL_MS + 2000) / 1000 if what == "consumer" else rng.uniform(2, 5)
    os.kill(pid, signal.SIGSTOP)
    c.stopped.add(pid)
    c.say(f"pause {what} (pid {pid}): SIGSTOP for {hold:.1f} s"
          + (" (past its lock lease)" if what == "consumer" else "")
          + (" (past its failover)" if what == "redis-primary" else ""))
    time.sleep(hold)

    def heal():
        if pid in c.stopped:
            os.kill(pid, signal.SIGCONT)
            c.stopped.discard(pid)
    return heal


def fault_clock(c, rng):
    skews = {}
    for d in ("consumer", "producer"):
        # (up to 2 minutes behind: the stack's certificates are minutes old,
        # and a client further behind would find them not yet valid)
        s = rng.choice([-1, 1]) * rng.randint(5, 120)
        skews[d] = f"{s:+d}"
        c.stop(d)
        c.start(d, skew=skews[d])
    c.say("clocks: consumer and producer restarted with wall clocks "
          + ", ".join(f"{d} {s} s" for d, s in skews.items()) + " (libfaketime)")

    def heal():
        for d in ("consumer", "producer"):
            c.stop(d)
            c.start(d)
    return heal


def fault_kill(c, rng):
    what = rng.choice(["producer", "consumer", "kafka-broker", "redis-primary", "postgres"])
    if what in ("producer", "consumer"):
        pid = c.procs[what].pid
        c.stop(what, signal.SIGKILL)
        c.say(f"kill {what} (pid {pid}, SIGKILL)")
        return lambda: c.start(what)
    service = {"kafka-broker": f"kafka3-{rng.randint(1, 3)}", "postgres": "postgres",
               "redis-primary": redis_service(c, redis_victim(c, rng))}[what]
    c.stack("kill", service)
    c.say(f"kill {service} (scripts/stack kill)")
    return lambda: c.stack("start", service, timeout=300)


FAULTS = {"partitions": fault_partition, "netem": fault_loss, "pauses": fault_pause,
          "clocks": fault_clock, "kills": fault_kill}


def schedule(c, rng, seconds, counts, events):
    """Fault, hold, heal, settle, until SECONDS pass and every kind ran once;
    once, after half of them, both topics replayed and a burst of payments
    for unknown ids, in a slot of its own (replays.py)."""
    order = []
    end = c.t() + seconds
    mid = c.t() + seconds / 2
    while c.t() < end or any(counts[k] == 0 for k in KINDS):
        if not order:
            order = KINDS[:]
            rng.shuffle(order)
        kind = order.pop()
        if c.t() >= end and counts[kind] > 0:
            continue
        hold = rng.uniform(3, 8)
        heal = FAULTS[kind](c, rng)
        counts[kind] += 1
        events.append({"t": round(c.t(), 1), "kind": kind})
        time.sleep(hold)
        heal()
        c.say(f"heal ({kind}); settle 4 s")
        time.sleep(4)
        c.restart_exited()
        if mid is not None and c.t() >= mid:
            replays(c, events)
            mid = None
