#!/usr/bin/env python3
"""tests/cli/http_raw.py: raw HTTP/1.1 bytes against a server, for
tests/cli/test_http_strict.sh. Python's socket module only: no client library
that would fix up what the tests send on purpose.

  http_raw.py ask PORT REQUEST [WAIT_S]
      Send REQUEST (Python escapes: \\r, \\n, \\x00) from 127.0.0.1, read until
      the server closes or WAIT_S (default 1) pass (a HEAD's answers have no
      body). Prints one line:
      "STATUSES STATE" (STATUSES: the status of each whole response, comma
      separated, "-" for none; STATE: "closed" or "open"), then the first
      response's Retry-After ("-" when absent), then its body.
  http_raw.py once PORT REQUEST [WAIT_S]
      As ask, but counts what is on the wire rather than what parses. Prints
      one line: "LINES STATUSES STATE REST" (LINES: how many status lines,
      "HTTP/1.x NNN ...", start anywhere in the bytes read, a body's end
      included, as a response follows a body with no line break; REST: how
      many bytes follow the whole responses), then the last response's body.
      An answer written once is "1 400 closed 0"; a status line and headers
      written twice are "2 400 closed N", the second copy taken for the body.
  http_raw.py interleave PORT A1 B1 A2 B2
      Two connections, a and b: A1 on a, B1 on b, A2 on a (0.2 s apart, for the
      server to read them in that order), a read until closed or 1 s, then B2
      on b and b read the same way. Prints a's and b's "LINES STATUSES STATE
      REST" (as once), one line each.
  http_raw.py trickle PORT PATH DEADLINE_S
      GET PATH answered on a kept-alive connection, then a next head sent a
      byte every 0.25 s: prints "closed MS" (ms from the answer to the
      server's close) or "open" if DEADLINE_S passed.
  http_raw.py crowd PORT ADDRS PER_ADDR KINDS TRICKLE_S WAIT_S
      ADDRS x PER_ADDR connections from 127.0.0.2... each send a request a byte
      every TRICKLE_S and connect again whenever the server closes one. KINDS,
      comma separated, taken in turn: "head" trickles a request head;
      "length" and "chunked" send a whole buy head at once, then trickle its
      body (Content-Length: 1000, or a chunk of 1000 bytes). Once the server
      has accepted them all, a client from the next address asks GET
      /api/v1/nope (404, from the HTTP thread alone). Prints "filled=0|1" (the
      table was full: the client waited in the listen queue), "fresh=STATUS
      MS" or "fresh=- MS" after WAIT_S, and "first_open=N first_min_ms=MS
      first_max_ms=MS": of the first ADDRS x PER_ADDR, how many were still
      open at the end, and the shortest and longest life of those closed.
  http_raw.py repeat PORT N REQUEST
      REQUEST on N connections one after the other, each read until the
      server closes it (3 s at most); prints nothing.
  http_raw.py overload PORT ADDRS PER_ADDR PATH ROUNDS
      ADDRS x PER_ADDR connections send GET PATH at once, ROUNDS times or until
      some answers are 429 overloaded; prints "overloaded=N retry_after=M".
"""
import re
import selectors
import socket
import sys
import time


def unescape(s):
    return s.encode("latin1").decode("unicode_escape").encode("latin1")


def parse(buf, head=False):
    """The whole responses at the start of buf: [(status, {name: [values]}, body)], rest.
    head: answers to HEAD requests, whose Content-Length is no body's."""
    out = []
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return out, buf
        lines = buf[:end].decode("latin1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            return out, buf
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs.setdefault(k.strip().lower(), []).append(v.strip())
        n = 0 if head else int(hdrs.get("content-length", ["0"])[0])
        if len(buf) < end + 4 + n:
            return out, buf
        out.append((int(parts[1]), hdrs, buf[end + 4:end + 4 + n]))
        buf = buf[end + 4 + n:]


def connect(port, src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_until_close(s, deadline):
    """Everything until the server closes (True) or the deadline (False)."""
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return buf, False
        s.settimeout(left)
        try:
            b = s.recv(65536)
        except socket.timeout:
            return buf, False
        except ConnectionResetError:
            return buf, True
        if not b:
            return buf, True
        buf += b


def ask(port, req, wait_s=1.0):
    s = connect(port)
    s.sendall(unescape(req))
    buf, closed = read_until_close(s, time.monotonic() + wait_s)
    s.close()
    resps, _ = parse(buf, req.startswith("HEAD "))
    print("%s %s" % (",".join(str(r[0]) for r in resps) or "-", "closed" if closed else "open"))
    print(resps[0][1].get("retry-after", ["-"])[0] if resps else "-")
    print(resps[0][2].decode("latin1") if resps else "")


STATUS_LINE = re.compile(rb"HTTP/1\.[0-9] [0-9]{3}[ \r]")


def once(port, req, wait_s=1.0):
    s = connect(port)
    s.sendall(unescape(req))
    buf, closed = read_until_close(s, time.monotonic() + wait_s)
    s.close()
    resps, _ = parse(buf)
    print(wire(buf, closed))
    print(resps[-1][2].decode("latin1") if resps else "")


def wire(buf, closed):
    """once's first line for the bytes read."""
    resps, rest = parse(buf)
    return "%d %s %s %d" % (len(STATUS_LINE.findall(buf)), ",".join(str(r[0]) for r in resps) or "-",
                            "closed" if closed else "open", len(rest))


def interleave(port, a1, b1, a2, b2):
    a, b = connect(port), connect(port)
    for s, req in ((a, a1), (b, b1), (a, a2)):
        s.sendall(unescape(req))
        time.sleep(0.2)
    print(wire(*read_until_close(a, time.monotonic() + 1.0)))
    b.sendall(unescape(b2))
    print(wire(*read_until_close(b, time.monotonic() + 1.0)))
    a.close()
    b.close()


def trickle(port, path, deadline_s):
    s = connect(port)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
    buf = b""
    end = time.monotonic() + 5
    while not parse(buf)[0] and time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        if not b:
            break
        buf += b
    if not parse(buf)[0]:
        print("no-answer")
        return
    t0 = time.monotonic()
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000
    for i in range(len(head)):
        if time.monotonic() - t0 > deadline_s:
            break
        try:
            s.send(head[i:i + 1])
        except OSError:
            print("closed %d" % ((time.monotonic() - t0) * 1000))
            return
        _, closed = read_until_close(s, time.monotonic() + 0.25)
        if closed:
            print("closed %d" % ((time.monotonic() - t0) * 1000))
            return
    print("open")


def accept_queue(port):
    """The listen queue of 127.0.0.1:port: connections the server has not accepted yet."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            c = line.split()
            if c[3] == "0A" and int(c[1].split(":")[1], 16) == port:
                return int(c[4].split(":")[1], 16)
    return -1


class Slow:
    """One connection of the crowd: a request sent a byte at a time, its head
    (kind "head"), or after a whole buy head its body, promised by
    Content-Length or in a chunk (kinds "length" and "chunked")."""
    BUY = b"POST /api/v1/seckill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    START = {
        "head": b"",
        "length": BUY + b"Content-Length: 1000\r\n\r\n",
        "chunked": BUY + b"Transfer-Encoding: chunked\r\n\r\n3e8\r\n",
    }
    TRICKLE = {"head": BUY + b"X-Pad: " + b"a" * 4000, "length": b"a" * 1000, "chunked": b"a" * 1000}

    def __init__(self, port, src, kind, sel):
        self.port, self.src, self.kind, self.sel = port, src, kind, sel
        self.first, self.closed_ms = True, None
        self.open()

    def open(self):
        self.s = connect(self.port, self.src)
        self.s.setblocking(False)
        self.t0, self.sent = time.monotonic(), 0
        if self.START[self.kind]:
            self.s.send(self.START[self.kind])
        self.sel.register(self.s, selectors.EVENT_READ, self)

    def gone(self):
        """True once the server has closed it (it never answers: it reads)."""
        try:
            return self.s.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def step(self):
        """A byte more."""
        try:
            self.s.send(self.TRICKLE[self.kind][self.sent:self.sent + 1])
            self.sent += 1
        except OSError:
            pass


def crowd(port, addrs, per_addr, kinds, trickle_s, wait_s):
    """kinds: comma separated, taken in turn by the connections."""
    kinds = kinds.split(",")
    sel = selectors.DefaultSelector()
    first = [Slow(port, "127.0.0.%d" % (2 + i // per_addr), kinds[i % len(kinds)], sel)
             for i in range(addrs * per_addr)]
    crowd_ = list(first)
    lives = []
    for c in crowd_:
        c.step()
    end = time.monotonic() + 10
    while accept_queue(port) != 0 and time.monotonic() < end:
        time.sleep(0.02)
    fresh = connect(port, "127.0.0.%d" % (2 + addrs))
    fresh.sendall(b"GET /api/v1/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    fresh.setblocking(False)
    t0 = time.monotonic()
    filled, status, fresh_ms, buf, next_step = 0, None, 0, b"", t0 + trickle_s
    # Until the fresh client has its answer and every one of the first crowd
    # is closed, or wait_s.
    while time.monotonic() - t0 < wait_s and (status is None or any(c.closed_ms is None for c in first)):
        if not filled and time.monotonic() - t0 < 1 and accept_queue(port) >= 1:
            filled = 1
        try:
            b = fresh.recv(65536) if status is None else b""
            buf += b
            resps, _ = parse(buf)
            if status is None and (resps or not b):
                status = resps[0][0] if resps else "closed"
                fresh_ms = (time.monotonic() - t0) * 1000
        except BlockingIOError:
            pass
        if time.monotonic() >= next_step:
            next_step += trickle_s
            for c in crowd_:
                c.step()
        for key, _ in sel.select(0.01):
            c = key.data
            if not c.gone():
                continue
            # The crowd tries again at once.
            if c.first:
                c.closed_ms = (time.monotonic() - c.t0) * 1000
                lives.append(c.closed_ms)
            sel.unregister(c.s)
            c.s.close()
            c.first = False
            try:
                c.open()
                c.step()
            except OSError:
                pass
    print("filled=%d" % filled)
    print("fresh=%s %d" % (status if status is not None else "-",
                           fresh_ms if status is not None else (time.monotonic() - t0) * 1000))
    print("first_open=%d first_min_ms=%d first_max_ms=%d" % (
        sum(1 for c in first if c.closed_ms is None), min(lives) if lives else -1, max(lives) if lives else -1))


def repeat(port, n, req):
    data = unescape(req)
    for _ in range(n):
        s = connect(port)
        s.sendall(data)
        read_until_close(s, time.monotonic() + 3)
        s.close()


def overload(port, addrs, per_addr, path, rounds):
    req = ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode()
    n429 = with_ra = 0
    for _ in range(rounds):
        socks = [connect(port, "127.0.0.%d" % (2 + a)) for a in range(addrs) for _ in range(per_addr)]
        for s in socks:
            s.sendall(req)
        for s in socks:
            buf, _ = read_until_close(s, time.monotonic() + 5)
            s.close()
            for status, hdrs, body in parse(buf)[0]:
                if status == 429 and b"overloaded" in body:
                    n429 += 1
                    with_ra += "retry-after" in hdrs
        if n429:
            break
    print("overloaded=%d retry_after=%d" % (n429, with_ra))


def main():
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "ask":
        ask(port, sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
    elif cmd == "once":
        once(port, sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
    elif cmd == "interleave":
        interleave(port, *sys.argv[3:7])
    elif cmd == "trickle":
        trickle(port, sys.argv[3], float(sys.argv[4]))
    elif cmd == "crowd":
        crowd(port, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6]), float(sys.argv[7]))
    elif cmd == "repeat":
        repeat(port, int(sys.argv[3]), sys.argv[4])
    elif cmd == "overload":
        overload(port, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
