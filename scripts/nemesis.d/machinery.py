"""scripts/nemesis.d/machinery.py: the nemesis' machinery: where each engine
and daemon runs (its host of scripts/hosts and its ports), and Cluster, which
makes the hosts, runs the HA stack in them (scripts/stack up --ha --brokers 3;
with --cluster the Redis Cluster too, each node in a host of its own, and the
daemons on it) and the producer and the consumer, and takes all of it down
again.
Imported by scripts/nemesis (the run), faults.py and checker.py.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

# (this file is scripts/nemesis.d/machinery.py: the checkout is three levels up)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS = os.path.join(ROOT, "scripts", "hosts")
STATE = os.path.join(ROOT, ".stack", "nemesis")
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

# Each engine of the HA stack on a host of its own, with the ports it
# listens on (scripts/hosts publish makes them answer on 127.0.0.1 everywhere).
ENGINES = {  # service of scripts/stack: (host, ports)
    "redis": ("redis1", [16379]),
    "redis-replica": ("redis2", [16380]),
    "sentinel-1": ("sent1", [16390]),
    "sentinel-2": ("sent2", [16391]),
    "sentinel-3": ("sent3", [16392]),
    "postgres": ("pg1", [15432]),
    "pg-standby": ("pg2", [15433]),
    "kafka3-1": ("kafka1", [19192, 19292]),
    "kafka3-2": ("kafka2", [19193, 19293]),
    "kafka3-3": ("kafka3", [19194, 19294]),
}
# ctl runs scripts/stack, seckillctl and the checker's queries (and the
# single-node Kafka that `up` always starts, which nothing else uses).
DAEMONS = {"producer": ("prod", [8080, 9099]), "consumer": ("cons", [9101])}
SENTINELS = ["sent1", "sent2", "sent3"]
BROKERS = ["kafka1", "kafka2", "kafka3"]
REDIS_HOST_OF_PORT = {"16379": "redis1", "16380": "redis2"}
REDIS_SERVICE_OF_HOST = {"redis1": "redis", "redis2": "redis-replica"}
# The Redis Cluster (--cluster): node N of scripts/stack's rcluster-1..6 on
# host rcN, with its port and its cluster bus port (Redis's: +10000). The
# HA Redis and its Sentinels still run (scripts/stack up --ha starts them);
# the daemons do not use them.
RCLUSTER = {f"rcluster-{n}": (f"rc{n}", [16400 + n, 26400 + n]) for n in range(1, 7)}
RCLUSTER_HOSTS = [h for h, _ in RCLUSTER.values()]
RCLUSTER_NODE_TIMEOUT_MS = 2000  # scripts/stack's
LOCK_TTL_MS = 4000
DOWN_AFTER_MS = 2000   # scripts/stack's Sentinel down-after-milliseconds


def log(msg):
    print(msg, flush=True)


class Broken(Exception):
    """The run could not be made (not a finding about the programs)."""


# --- the machinery: hosts, the stack, the daemons -----------------------------

class Cluster:
    def __init__(self, args, t0):
        self.args = args
        self.t0 = t0
        self.build = os.path.abspath(args.build)
        self.work = os.path.join(self.build, "nemesis")
        self.cfg = os.path.join(self.work, "seckill.cfg")
        self.env = dict(os.environ)
        self.env.setdefault("SECKILL_HOSTS_PREFIX", "sknemesis")
        self.env.setdefault("SECKILL_HOSTS_SUBNET", "10.231.1")
        self.env.setdefault("SECKILL_HOSTS_STATE", "/run/seckill-hosts-nemesis")
        self.env["SECKILL_STACK_DIR"] = STATE
        self.env["SECKILL_KAFKA_HEAP"] = "256m"
        self.cluster = bool(getattr(args, "cluster", False))
        self.engines = dict(ENGINES, **RCLUSTER) if self.cluster else ENGINES
        self.env["SECKILL_STACK_HOSTS"] = " ".join(f"{s}={h}" for s, (h, _) in self.engines.items())
        self.procs = {}      # daemon name -> Popen
        self.exits = []      # daemons that exited by themselves: (time, name, status)
        self.skew = {}       # daemon name -> FAKETIME offset while skewed
        self.stopped = set()  # pids under SIGSTOP

    def t(self):
        return time.monotonic() - self.t0

    def say(self, msg):
        log(f"[{self.t():6.1f}s] {msg}")

    def run(self, *cmd, check=True, quiet=True, timeout=300, input=None):
        r = subprocess.run(cmd, env=self.env, cwd=ROOT, text=True, timeout=timeout, input=input,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if check and r.returncode != 0:
            raise Broken(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout[-3000:]}")
        if not quiet:
            sys.stdout.write(r.stdout)
        return r

    def hosts(self, *a, **kw):
        return self.run(HOSTS, *a, **kw)

    def in_ctl(self, *cmd, **kw):
        return self.run(HOSTS, "exec", "ctl", *cmd, **kw)

    def stack(self, *a, **kw):
        """scripts/stack in ctl; what it says goes to build/nemesis/stack.log."""
        r = self.in_ctl(os.path.join(ROOT, "scripts", "stack"), *a, **kw)
        with open(os.path.join(self.work, "stack.log"), "a") as f:
            f.write(f"--- {self.t():.1f}s: scripts/stack {' '.join(a)}: exit {r.returncode}\n{r.stdout}")
        return r

    def ctl(self, *a, **kw):
        return self.in_ctl(os.path.join(self.build, "seckillctl"), "-c", self.cfg, *a, **kw)

    # up: hosts, the stack in them, the configuration, the items
    def up(self, items, pay_within=0, buckets=1):
        self.clean_leftovers()
        self.run("make", "-s", "--no-print-directory", f"BUILD={self.build}",
                 f"{self.build}/nemesis/cndskew.so")
        names = ["ctl", "client"] + [h for h, _ in self.engines.values()] + [h for h, _ in DAEMONS.values()]
        self.hosts("up", *names)
        for host, ports in list(self.engines.values()) + list(DAEMONS.values()):
            self.hosts("publish", host, *map(str, ports))
        os.makedirs(os.path.join(STATE, "kafka"), exist_ok=True)
        libs = os.path.join(ROOT, ".stack", "kafka", "libs")
        if not os.path.exists(os.path.join(libs, ".complete")):
            raise Broken(f"no Kafka jars in {libs}: run scripts/stack up once first (it fetches them)")
        os.symlink(libs, os.path.join(STATE, "kafka", "libs"))
        up = ["up", "--ha", "--brokers", "3"] + (["--cluster"] if self.cluster else [])
        self.say(f"hosts up; scripts/stack {' '.join(up)} in them (minutes; build/nemesis/stack.log)")
        self.stack(*up, timeout=900)
        self.write_cfg()
        for item, stock in items:
            self.ctl("item", "create", "--id", str(item), "--stock", str(stock), "--name", "nemesis",
                     "--pay-within", str(pay_within), "--buckets", str(buckets))
        if buckets > 1:
            # where the buckets are (item show: on how many primaries)
            shown = self.ctl("item", "show", str(items[0][0])).stdout.splitlines()
            self.say(f"item {items[0][0]}: " + " ".join(next((ln for ln in shown if ln.lstrip().startswith(
                "buckets")), "buckets: not shown").split()))
        for d in DAEMONS:
            self.start(d)
        self.say("stack, producer and consumer up: " + ", ".join(
            f"{h} {self.hosts('addr', h).stdout.strip()}" for h in names))

    def clean_leftovers(self):
        # a run killed by SIGKILL leaves its stack and hosts: stop and remove them
        if os.path.isdir(STATE):
            self.run(os.path.join(ROOT, "scripts", "stack"), "down", check=False, timeout=300)
            pg = os.path.join(STATE, "pg")
            if os.path.islink(pg):
                shutil.rmtree(os.path.realpath(pg), ignore_errors=True)
            shutil.rmtree(STATE, ignore_errors=True)
        self.hosts("down", check=False)
        os.makedirs(self.work, exist_ok=True)
        for f in ("producer.log", "consumer.log", "stack.log", "history.jsonl"):
            if os.path.exists(os.path.join(self.work, f)):
                os.unlink(os.path.join(self.work, f))

    def write_cfg(self):
        """config/seckill-ha.cfg with this state folder, a short lock lease
        (a pause past it is cheap) and a quick sweeper (an unknown answer
        resolves within seconds)."""
        with open(os.path.join(ROOT, "config", "seckill-ha.cfg")) as f:
            text = f.read()
        subs = [('"../.stack/', f'"{STATE}/'),
                ('key_dir = "dev-keys"', f'key_dir = "{ROOT}/config/dev-keys"'),
                ("ttl_ms = 10000;", f"ttl_ms = {LOCK_TTL_MS};"),
                ("sweep_age_ms = 30000;", "sweep_age_ms = 5000;"),
                ("sweep_interval_ms = 5000;", "sweep_interval_ms = 1000;"),
                ("drain_timeout_ms = 30000;", "drain_timeout_ms = 5000;")]
        if self.cluster:
            # the Cluster's seeds instead of the Sentinels (config/seckill-cluster.cfg's)
            subs += [('sentinels = [ "127.0.0.1:16390", "127.0.0.1:16391", "127.0.0.1:16392" ];',
                      'cluster_nodes = [ "127.0.0.1:16401", "127.0.0.1:16402", "127.0.0.1:16403" ];'),
                     ('master_name = "seckill";', '')]
        for old, new in subs:
            if old not in text:
                raise Broken(f"config/seckill-ha.cfg has no '{old}' to change")
            text = text.replace(old, new)
        with open(self.cfg, "w") as f:
            f.write(text)
        self.ctl("-t")

    # the producer and the consumer: started in their hosts, maybe with a skewed clock
    def start(self, name, skew=None):
        host = DAEMONS[name][0]
        env = dict(self.env)
        if skew:
            # (cndskew.so first: libfaketime misses C11's cnd_timedwait, librdkafka's)
            env.update(LD_PRELOAD=f"{self.build}/nemesis/cndskew.so:{LIBFAKETIME}", FAKETIME=skew,
                       FAKETIME_DONT_FAKE_MONOTONIC="1")
        logf = open(os.path.join(self.work, f"{name}.log"), "a")
        logf.write(f"--- started at {self.t():.1f}s{' with FAKETIME=' + skew if skew else ''}\n")
        logf.flush()
        self.procs[name] = subprocess.Popen(
            [HOSTS, "exec", host, os.path.join(self.build, f"seckill-{name}"), "-c", self.cfg],
            env=env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT)
        self.skew[name] = skew
        port = DAEMONS[name][1][-1]
        self.wait(f"{name} /healthz", 60, lambda: self.in_ctl(
            "curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/healthz",
            check=False).returncode == 0, proc=self.procs[name])

    def stop(self, name, sig=signal.SIGTERM):
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        if p.pid in self.stopped:
            os.kill(p.pid, signal.SIGCONT)
            self.stopped.discard(p.pid)
        p.send_signal(sig)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def wait(self, what, seconds, cond, proc=None):
        end = time.monotonic() + seconds
        while not cond():
            if proc is not None and proc.poll() is not None:
                raise Broken(f"{what}: the process exited ({proc.returncode}); see {self.work}")
            if time.monotonic() > end:
                raise Broken(f"{what}: not within {seconds} s")
            time.sleep(0.2)

    def restart_exited(self):
        """A daemon that exited by itself is started again, as systemd's
        Restart= would, and reported (the programs stop on some errors,
        e.g. librdkafka's fatal idempotence errors)."""
        for name, p in self.procs.items():
            if p.poll() is not None:
                self.say(f"{name} exited by itself (status {p.returncode}; "
                         f"see build/nemesis/{name}.log): started again")
                self.exits.append({"t": round(self.t(), 1), "daemon": name, "status": p.returncode})
                self.start(name, skew=self.skew.get(name))

    def redis_primary(self):
        for s in (16390, 16391, 16392):
            r = self.in_ctl("redis-cli", "-h", "127.0.0.1", "-p", str(s), "SENTINEL",
                            "get-master-addr-by-name", "seckill", check=False)
            port = r.stdout.split()[-1] if r.returncode == 0 and r.stdout.split() else ""
            if port in REDIS_HOST_OF_PORT:
                return REDIS_HOST_OF_PORT[port]
        return "redis1"

    def redis_primaries(self):
        """The hosts of the Cluster's primaries that serve slots, as the
        nodes see it now (CLUSTER NODES of the first that answers)."""
        for n in range(1, 7):
            r = self.stack("redis-cli", "-p", str(16400 + n), "CLUSTER", "NODES", check=False)
            if r.returncode != 0:
                continue
            hosts = []
            for line in r.stdout.splitlines():
                f = line.split()
                if len(f) > 8 and "master" in f[2].split(",") and "fail" not in f[2]:
                    port = int(f[1].split("@")[0].rsplit(":", 1)[1])
                    hosts.append(f"rc{port - 16400}")
            if hosts:
                return sorted(hosts)
        raise Broken("no node of the Redis Cluster answered CLUSTER NODES")

    def pid_of(self, service):
        if service.startswith("rcluster-"):
            path = f"rcluster/node-{service[len('rcluster-'):]}/redis.pid"
        else:
            path = {"redis": "redis/redis.pid", "redis-replica": "redis-replica/redis.pid"}[service]
        with open(os.path.join(STATE, path)) as f:
            return int(f.read().split()[0])

    def down(self):
        for pid in list(self.stopped):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for d in list(self.procs):
            self.stop(d, signal.SIGKILL)
        if os.path.isdir(STATE):
            self.stack("down", check=False, timeout=300)
            pg = os.path.join(STATE, "pg")
            if os.path.islink(pg):
                shutil.rmtree(os.path.realpath(pg), ignore_errors=True)
            shutil.rmtree(STATE, ignore_errors=True)
        self.hosts("down", check=False)
