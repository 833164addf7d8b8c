#!/usr/bin/python3
"""Hostile load on specdec serve at 127.0.0.1:PORT, for tests/server/test_dos.sh.

  stall PORT N BYTES       N uploads that announce a 4 MiB body, send BYTES of it and stop there;
                           prints "ready N" once all have sent, then waits until killed
  big PORT N MIB SECONDS   N clients, each sending completion requests with a prompt of MIB MiB
                           one after another for SECONDS; prints the answers' status counts
Every loop is bounded (the counts, and SECONDS, and 600 s of waiting at most)."""
import socket
import sys
import threading
import time


def stall(port, n, size):
    socks = []
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4194304\r\n\r\n"
    body = b'{"prompt": "' + b"a" * (size - 12)
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(head)
        socks.append(s)
    for s in socks:  # the bodies after all heads: every connection is open before the bytes flow
        s.sendall(body)
    print("ready", len(socks), flush=True)
    time.sleep(600)


def big(port, n, mib, seconds, unit=b"a"):
    prompt = (unit * (int(mib * (1 << 20)) // len(unit) + 1))[:int(mib * (1 << 20))]
    body = b'{"prompt": "' + prompt + b'", "max_tokens": 8}'
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
           % len(body)) + body
    counts = {}
    lock = threading.Lock()
    end = time.time() + seconds

    def client():
        while time.time() < end:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.sendall(req)
                status = s.recv(64).split(b" ")[1].decode()
                s.close()
            except OSError as e:
                status = type(e).__name__
            with lock:
                counts[status] = counts.get(status, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(" ".join("%s:%d" % kv for kv in sorted(counts.items())), flush=True)


if __name__ == "__main__":
    cmd, port, *rest = sys.argv[1:]
    if cmd == "stall":
        stall(int(port), int(rest[0]), int(rest[1]))
    else:
        big(int(port), int(rest[0]), float(rest[1]), float(rest[2]), *(r.encode() for r in rest[3:4]))
