#!/usr/bin/python3
"""Raw-socket clients for what curl cannot do, against specdec serve on 127.0.0.1:PORT.

  pipeline PORT            four requests in one write (GET, 404, 405, GET): prints each status
                           and whether the connection stayed open after them
  halfclose PORT BODY      POST /v1/completions, then shutdown(SHUT_WR): prints the response body
  reset PORT BODY SECONDS  POST /v1/completions, wait, then close with a reset (SO_LINGER 0)
  raw PORT HEX [later]     send bytes (hex), print the response (status line, then the body);
                           later: on a kept-alive connection, after a GET /health answered 200
  frames PORT              on one connection: a chunked POST, a POST whose body holds a blank line
                           and request-like text, then a GET: prints each status
  trickle PORT SECONDS     a body announced as 1000 bytes sent one byte a second: prints after how
                           many seconds the server closed the connection
  hold PORT BYTES          announce 4 MiB, send BYTES of it, then wait until killed
  idle PORT N              open N connections that send nothing; wait until killed
Every wait is bounded."""
import socket
import sys
import time


def conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    return s


def read_response(s, buf=b""):
    """One HTTP/1.1 response (Content-Length or chunked), interim 1xx ones skipped as a client
    must: (status line, headers dict, body, what follows)."""
    while True:
        status, hdrs, body, rest = read_one(s, buf)
        if not status.split(" ")[1].startswith("1"):
            return status, hdrs, body, rest
        buf = rest


def read_one(s, buf):
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError("closed before a response")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    if lines[0].split(" ")[1].startswith("1"):
        return lines[0], hdrs, b"", rest
    if "content-length" in hdrs:
        n = int(hdrs["content-length"])
        while len(rest) < n:
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return lines[0], hdrs, rest[:n], rest[n:]
    body = b""
    while True:  # chunked
        while b"\r\n" not in rest:
            rest += s.recv(65536)
        size, rest = rest.split(b"\r\n", 1)
        size = int(size, 16)
        while len(rest) < size + 2:
            rest += s.recv(65536)
        body += rest[:size]
        rest = rest[size + 2:]
        if size == 0:
            return lines[0], hdrs, body, rest


def pipeline(port):
    s = conn(port)
    reqs = [b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"]
    s.sendall(b"".join(reqs))
    leftover = b""
    for _ in reqs:
        # responses may arrive in one read: feed what is left over back
        class Feed:
            def __init__(self, sock, pre):
                self.sock, self.pre = sock, pre

            def recv(self, n):
                if self.pre:
                    d, self.pre = self.pre, b""
                    return d
                return self.sock.recv(n)
        status, hdrs, body, leftover = read_response(Feed(s, leftover))
        print(status.split(" ", 2)[1], hdrs.get("connection", "keep-alive"))
    s.settimeout(0.5)
    try:
        d = s.recv(1)
        print("closed" if d == b"" else "data")
    except socket.timeout:
        print("open")


def halfclose(port, body):
    s = conn(port)
    data = body.encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    s.shutdown(socket.SHUT_WR)
    status, hdrs, out, _ = read_response(s)
    sys.stdout.write(out.decode())


def reset(port, body, seconds):
    s = conn(port)
    data = body.encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    time.sleep(float(seconds))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def raw(port, hexdata, when="first"):
    s = conn(port)
    if when == "later":
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, _, rest = read_response(s)
        assert status.split(" ")[1] == "200" and rest == b"", status
    s.sendall(bytes.fromhex(hexdata))
    s.settimeout(20)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    head, _, body = out.partition(b"\r\n\r\n")
    print(head.decode("latin1").split("\r\n")[0])
    for line in head.decode("latin1").split("\r\n")[1:]:
        if line.lower().startswith("content-type"):
            print(line)
    print(body.decode("utf-8", "replace"))


def frames(port):
    s = conn(port)
    body = b'{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}'
    trick = b'{"max_tokens": 2,\r\n\r\n"prompt": "GET /nothing HTTP/1.1"}'  # a blank line (JSON whitespace) in the body
    reqs = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
            + b"0\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(trick), trick),
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"]
    s.sendall(b"".join(reqs))

    class Feed:
        def __init__(self, sock):
            self.sock, self.pre = sock, b""

        def recv(self, n):
            if self.pre:
                d, self.pre = self.pre, b""
                return d
            return self.sock.recv(n)
    f = Feed(s)
    for _ in reqs:
        status, hdrs, body, f.pre = read_response(f)
        print(status.split(" ", 2)[1])


def trickle(port, seconds):
    s = conn(port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    t0 = time.time()
    s.settimeout(1.0)
    for _ in range(int(seconds)):
        try:
            s.send(b" ")
            d = s.recv(1)
            if d == b"":
                break
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
    print("%.0f" % (time.time() - t0))


def hold(port, n):
    s = conn(port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n")
    chunk = b"a" * 65536
    n = int(n)
    while n > 0:
        s.sendall(chunk[:min(n, len(chunk))])
        n -= len(chunk)
    print("held", flush=True)
    time.sleep(600)


def idle(port, n):
    socks = [conn(port) for _ in range(int(n))]
    print("open", len(socks), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    cmd, port, *rest = sys.argv[1:]
    {"pipeline": pipeline, "halfclose": halfclose, "reset": reset, "raw": raw, "frames": frames, "trickle": trickle,
     "hold": hold, "idle": idle}[cmd](int(port), *rest)
