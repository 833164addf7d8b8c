#!/usr/bin/python3
# Load client for the deploy tests and benchmarks (standard library only): greedy completions and
# chats, streamed and not, from several client threads against one or more URLs; each answer is
# checked against a reference text, its replica (X-Specdec-Replica) and latency recorded. It can
# kill -9 a replica in the middle of the load, at a moment one of its streams is running, and time
# how long HAProxy takes to mark it down; and it can hold a multi-turn conversation.
#   load.py refs  --bin SPECDEC --out REFS.json [--chat-template NAME] -- GENERATE_ARGS...
#                 references by `specdec generate`
#   load.py run   --url URL [--url URL2] --refs REFS.json --requests N --clients C --out RESULTS.json
#                 [--stream-every K] [--until-file F --max-seconds S] [--kill PID --kill-replica rI
#                 --stats URL] [--progress FILE]
#   load.py conv  --url URL --turns T [--header ID | --user ID] [--tag WORDS] --out TURNS.json
import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

# Story openings for stories260K; each is asked as a completion and as a chat, each with its own
# length, so that requests differ in prompt and output length.
PROMPTS = [
    "Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big fish",
    "The sun was hot", "Tim had a red ball", "There was a tree", "Mom said to Sue",
    "A cat sat on the mat", "Ben wanted to fly", "The girl found a box", "It was a rainy day",
]


def refs_main(a):
    refs = []
    for i, p in enumerate(PROMPTS):
        for kind in ("completion", "chat"):
            n = a.max_tokens or 48 + (i * 37 + (kind == "chat") * 53) % 153
            cmd = [a.bin, "generate", *a.gen_args, "-p", p, "-n", str(n), "--no-stream"]
            if kind == "chat":  # (generate refuses a template without --chat)
                cmd[cmd.index("-p"):cmd.index("-p")] = ["--chat"] + (["--chat-template", a.chat_template] if a.chat_template else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, errors="replace").stdout
            if not out.endswith("\n"):
                sys.exit(f"load.py refs: generate's output does not end with its newline: {out[-80:]!r}")
            out = out[:-1]
            if kind == "completion":
                if not out.startswith(p):
                    sys.exit(f"load.py refs: generate's output does not start with its prompt {p!r}: {out[:80]!r}")
                out = out[len(p):]
            refs.append({"kind": kind, "prompt": p, "max_tokens": n, "text": out})
    with open(a.out, "w") as f:
        json.dump(refs, f, indent=1)


def request_body(ref, stream, extra=None):
    b = {"max_tokens": ref["max_tokens"], "temperature": 0, "stream": stream}
    if ref["kind"] == "chat":
        b["messages"] = [{"role": "user", "content": ref["prompt"]}]
    else:
        b["prompt"] = ref["prompt"]
    b.update(extra or {})
    return json.dumps(b)


class Conn:
    """One keep-alive connection per client thread and URL, reopened after any failure."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.c = None

    def post(self, path, body, headers=None):
        if self.c is None:
            self.c = http.client.HTTPConnection(self.host, self.port, timeout=120)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        self.c.request("POST", path, body=body, headers=h)
        return self.c.getresponse()

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None


def sse_lines(r):
    """The body's lines. Not r.readline(): its peek() takes a chunked body cut short for its end,
    where read1() raises http.client.IncompleteRead."""
    buf = b""
    while True:
        data = r.read1(65536)
        if not data:
            break
        buf += data
        *lines, buf = buf.split(b"\n")
        yield from lines
    if buf:
        yield buf


def one_request(conn, ref, stream, rec, live):
    """Sends one request; fills rec: status, text, replica, and what went wrong if anything."""
    path = "/v1/chat/completions" if ref["kind"] == "chat" else "/v1/completions"
    try:
        r = conn.post(path, request_body(ref, stream))
    except Exception as e:  # no answer at all: the balancer could not serve it
        rec.update(error=f"{type(e).__name__}: {e}")
        conn.close()
        return
    rec["status"] = r.status
    rec["replica"] = r.getheader("X-Specdec-Replica")
    if r.status != 200 or not stream:
        try:
            body = r.read()
        except Exception as e:
            rec.update(error=f"{type(e).__name__} reading the body: {e}")
            conn.close()
            return
        if r.status != 200:
            rec["error"] = body.decode(errors="replace")[:300]
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
            return
        j = json.loads(body)
        ch = j["choices"][0]
        rec["text"] = ch["message"]["content"] if ref["kind"] == "chat" else ch["text"]
        rec["finish"] = ch["finish_reason"]
        rec["tokens"] = j["usage"]["completion_tokens"]
        return
    # a stream: data lines until [DONE]; anything else (the connection cut, an error event) is a cut
    text, done, events = [], False, 0
    rec["cut"] = None
    live.add(rec["i"])
    rec["first_chunk"] = None
    try:
        for line in sse_lines(r):
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                done = True
                continue
            ev = json.loads(data)
            events += 1
            if rec["first_chunk"] is None:
                rec["first_chunk"] = time.time()
            if "error" in ev:
                rec["cut"] = "error event: " + json.dumps(ev["error"])
                continue
            ch = ev["choices"][0] if ev.get("choices") else {}
            piece = ch.get("delta", {}).get("content") if ref["kind"] == "chat" else ch.get("text")
            text.append(piece or "")
            if ch.get("finish_reason"):
                rec["finish"] = ch["finish_reason"]
    except http.client.IncompleteRead:
        rec["cut"] = "IncompleteRead: the chunked body ended without its last chunk"
        conn.close()
    except Exception as e:
        rec["cut"] = f"{type(e).__name__}: {e}"
        conn.close()
    finally:
        live.discard(rec["i"])
    rec["events"] = events
    rec["text"] = "".join(text)
    if not done and rec["cut"] is None:
        rec["cut"] = "the stream ended without [DONE]"
        conn.close()
    if rec["cut"] is None:
        rec["tokens"] = None  # streams carry no usage without include_usage


def stats_states(url):
    """HAProxy's stats CSV: {server: status} of backend 'replicas'."""
    try:
        c = Conn(url)
        u = urllib.parse.urlsplit(url)
        c.c = http.client.HTTPConnection(c.host, c.port, timeout=2)
        c.c.request("GET", u.path + ";csv")
        rows = c.c.getresponse().read().decode().splitlines()
        c.close()
    except Exception:
        return {}
    out = {}
    for row in rows:
        f = row.split(",")
        if len(f) > 17 and f[0] == "replicas" and f[1].startswith("r"):
            out[f[1]] = f[17]
    return out


def killer(a, recs, live, lock, killed, state, nxt):
    """Once a quarter of the requests are done: freeze the replica, and if one of its streams is
    running and has sent a chunk, kill -9 it (else let it go on and try again: the load goes on
    until the kill); then time how long HAProxy takes to mark it down."""
    for _ in range(2000):
        with lock:
            done = sum(1 for r in recs if r.get("t_end"))
        if done >= a.requests // 4:
            break
        time.sleep(0.005)
    for attempt in range(400):
        with lock:
            if nxt[0] >= 20 * a.requests:  # the load is over: kill anyway, and say so
                break
        os.kill(a.kill, signal.SIGSTOP)
        time.sleep(0.05)  # what it had sent arrives
        with lock:
            running = [i for i in list(live) if recs[i].get("replica") == a.kill_replica and recs[i].get("first_chunk")]
        if running:
            t = time.time()
            os.kill(a.kill, signal.SIGKILL)
            state.update(kill_time=t, kill_attempts=attempt + 1, streams_running_at_kill=len(running), kill_at=nxt[0])
            break
        os.kill(a.kill, signal.SIGCONT)
        time.sleep(0.01)
    if "kill_time" not in state:
        os.kill(a.kill, signal.SIGKILL)
        state.update(kill_time=time.time(), kill_attempts=attempt + 1, streams_running_at_kill=0, kill_at=nxt[0])
    killed.set()
    if a.stats:
        for _ in range(300):
            if stats_states(a.stats).get(a.kill_replica, "").startswith("DOWN"):
                state["down_after_s"] = time.time() - state["kill_time"]
                break
            time.sleep(0.02)


def run_main(a):
    refs = json.load(open(a.refs))
    n = a.requests
    recs = [{"i": i} for i in range(20 * n if a.kill else n)]
    nxt = [0]
    lock = threading.Lock()
    live = set()
    state = {}
    killed = threading.Event()
    t0 = time.time()

    def worker(w):
        conns = [Conn(u) for u in a.url]
        while True:
            with lock:
                i = nxt[0]
                # with a kill, the load goes on until it and n/2 requests after it (at most 20n)
                if i >= n and (not a.kill or (killed.is_set() and i >= state["kill_at"] + n // 2) or i >= 20 * n):
                    break
                if a.until_file and (os.path.exists(a.until_file) or time.time() - t0 > a.max_seconds):
                    break
                nxt[0] += 1
            # with several URLs, each prompt goes to each of them in turn
            ri = (i // len(a.url)) % len(refs)
            ref = refs[ri]
            stream = a.stream_every > 0 and i % a.stream_every == 0
            rec = recs[i]
            rec.update(kind=ref["kind"], stream=stream, ref=ri, url=i % len(a.url), t_start=time.time())
            one_request(conns[i % len(a.url)], ref, stream, rec, live)
            rec["t_end"] = time.time()
            rec["equal"] = rec.get("text") == ref["text"]
            if a.progress and i % 20 == 0:
                with open(a.progress, "w") as f:
                    f.write(str(i))
        for c in conns:
            c.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(a.clients)]
    if a.kill:
        threads.append(threading.Thread(target=killer, args=(a, recs, live, lock, killed, state, nxt)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    recs = [r for r in recs if "t_start" in r]
    summary = summarise(a, recs, refs, wall)
    summary.update(state)
    with open(a.out, "w") as f:
        json.dump({"summary": summary, "requests": recs}, f, indent=1)
    print(json.dumps(summary))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else None


def summarise(a, recs, refs, wall):
    s = {"requests": len(recs), "wall_s": round(wall, 3)}
    failed = [r for r in recs if r.get("status") != 200 or "error" in r]
    cut = [r for r in recs if r.get("stream") and r.get("status") == 200 and r.get("cut")]
    whole = [r for r in recs if r not in failed and r not in cut]
    s["failed"] = len(failed)
    s["failed_streamed"] = sum(1 for r in failed if r.get("stream"))
    s["failed_not_streamed"] = len(failed) - s["failed_streamed"]
    s["failures"] = [{k: r.get(k) for k in ("i", "kind", "stream", "status", "replica", "error")} for r in failed[:5]]
    s["cut_streams"] = len(cut)
    s["cut_seen_by_client"] = sorted({r["cut"].split(":")[0] for r in cut})
    s["cut_replicas"] = sorted({r.get("replica") or "?" for r in cut})
    s["streamed"] = sum(1 for r in recs if r.get("stream"))
    s["mismatched"] = sum(1 for r in whole if not r["equal"])
    s["mismatches"] = [{"i": r["i"], "kind": r["kind"], "stream": r["stream"], "got": r.get("text", "")[:80],
                        "want": refs[r["ref"]]["text"][:80]} for r in whole if not r["equal"]][:3]
    s["by_replica"] = {}
    for r in whole:
        s["by_replica"][r.get("replica") or "direct"] = s["by_replica"].get(r.get("replica") or "direct", 0) + 1
    # tokens: from usage when not streamed, else the reference's count (the same greedy text)
    toks = sum(r["tokens"] if r.get("tokens") else 0 for r in whole)
    s["completion_tokens_not_streamed"] = toks
    s["requests_per_s"] = round(len(whole) / wall, 2) if wall > 0 else None
    s["tokens_per_s_not_streamed"] = round(toks / wall, 1) if wall > 0 else None
    for u in range(len(a.url)):
        lat = [1000 * (r["t_end"] - r["t_start"]) for r in whole if r["url"] == u]
        if lat:
            s[f"latency_ms_url{u}"] = {"median": round(statistics.median(lat), 3), "p99": round(pct(lat, 99), 3), "n": len(lat)}
    if len(a.url) == 2:
        # requests 2j and 2j + 1 carry the same prompt to the two URLs one after the other: the
        # first's latency minus the second's, pair by pair (a difference of the two p99s can
        # come out negative, since each tail has its own noise)
        by_i = {r["i"]: r for r in whole}
        d = [1000 * ((by_i[j]["t_end"] - by_i[j]["t_start"]) - (by_i[j + 1]["t_end"] - by_i[j + 1]["t_start"]))
             for j in range(0, len(recs), 2) if j in by_i and j + 1 in by_i]
        if d:
            s["latency_ms_added"] = {"median": round(statistics.median(d), 3), "p99": round(pct(d, 99), 3), "n": len(d)}
    return s


def conv_main(a):
    """A conversation of T turns, each a chat with the history; prints each turn's replica and
    the prompt tokens the replica's slot already held."""
    c = Conn(a.url)
    msgs, turns = [], []
    asks = ["Hi.", "More.", "Go on.", "And?", "Why?", "Then?", "Who?", "Where?", "How?", "Bye."]
    for t in range(a.turns):
        msgs.append({"role": "user", "content": (a.tag + " " if t == 0 and a.tag else "") + asks[t % len(asks)]})
        body = {"messages": msgs, "max_tokens": a.max_tokens, "temperature": 0}
        h = {}
        if a.header:
            h["X-Session-Id"] = a.header
        if a.user:
            body["user"] = a.user
        r = c.post("/v1/chat/completions", json.dumps(body), h)
        j = json.loads(r.read())
        if r.status != 200:
            sys.exit(f"load.py conv: turn {t + 1}: HTTP {r.status}: {j}")
        reply = j["choices"][0]["message"]["content"]
        msgs.append({"role": "assistant", "content": reply})
        turns.append({"turn": t + 1, "replica": r.getheader("X-Specdec-Replica"),
                      "prompt_tokens": j["usage"]["prompt_tokens"],
                      "cached_tokens": j["usage"]["prompt_tokens_details"]["cached_tokens"],
                      "cache_n": j["timings"]["cache_n"]})
    c.close()
    with open(a.out, "w") as f:
        json.dump(turns, f, indent=1)
    for t in turns:
        print(json.dumps(t))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("refs")
    r.add_argument("--bin", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--chat-template", help="the template the servers render chats with")
    r.add_argument("--max-tokens", type=int, help="every request's length (default: 48 to 200, by prompt)")
    r.add_argument("gen_args", nargs=argparse.REMAINDER)
    u = sub.add_parser("run")
    u.add_argument("--url", action="append", required=True)
    u.add_argument("--refs", required=True)
    u.add_argument("--requests", type=int, default=300)
    u.add_argument("--clients", type=int, default=16)
    u.add_argument("--stream-every", type=int, default=2, help="every K-th request is streamed (0: none)")
    u.add_argument("--until-file", help="stop starting requests once this file exists")
    u.add_argument("--max-seconds", type=float, default=300)
    u.add_argument("--kill", type=int, help="PID of the replica to kill -9 once a quarter of the requests are done")
    u.add_argument("--kill-replica", help="its name in HAProxy (r1, r2, ...)")
    u.add_argument("--stats", help="HAProxy's stats URL, to time the replica's marking down")
    u.add_argument("--progress")
    u.add_argument("--out", required=True)
    c = sub.add_parser("conv")
    c.add_argument("--url", required=True)
    c.add_argument("--turns", type=int, default=10)
    c.add_argument("--max-tokens", type=int, default=8)
    c.add_argument("--header")
    c.add_argument("--user")
    c.add_argument("--tag", help="words before the first message, so that conversations differ")
    c.add_argument("--out", required=True)
    a = p.parse_args()
    if a.cmd == "refs":
        if a.gen_args and a.gen_args[0] == "--":
            a.gen_args = a.gen_args[1:]
        refs_main(a)
    elif a.cmd == "run":
        if a.kill and not a.kill_replica:
            p.error("--kill needs --kill-replica")
        run_main(a)
    else:
        conv_main(a)


if __name__ == "__main__":
    main()
