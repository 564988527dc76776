#!/usr/bin/env python3
"""`deltafin serve` under slow clients (issue 33, item 2), on loopback, bounded in time.

200 connections each send a request line and then one header line a second, a head that never
ends; while they are all open, GET /health and a 4-token completion must each answer within a
second. Connections past --max-connections-per-address are refused at once (429). SIGTERM with
the slow connections still open ends the server within 5 s, exit code 0, and closes them.
Usage: slow_clients.py DELTAFIN_BINARY MODEL_DIR
"""
import http.client
import json
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time

SLOW_CLIENTS = 200
PER_ADDRESS = 256     # the cap the server runs with: the slow clients and this test's requests fit under it
ANSWER_SECONDS = 1.0  # /health and the completion, with the slow clients open
STOP_SECONDS = 5.0    # SIGTERM to exit
DRIBBLE_SECONDS = 1.0

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def start_server(binary, model, log):
    proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--draft", "off",
                             "--max-connections-per-address", str(PER_ADDRESS)], stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(log.name) as f:
            m = re.search(r"on http://([0-9.]+):([0-9]+)", f.read())
        if m:
            return proc, m.group(1), int(m.group(2))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    sys.exit("server did not start: " + open(log.name).read())


def timed_request(host, port, method, path, body=None):
    start = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        data = response.read()
        return response.status, data, time.monotonic() - start
    except OSError as e:
        return None, str(e).encode(), time.monotonic() - start
    finally:
        conn.close()


def main():
    binary, model = sys.argv[1:3]
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        proc, host, port = start_server(binary, model, log)
        slow = []
        stop_dribbling = threading.Event()
        try:
            for _ in range(SLOW_CLIENTS):
                s = socket.create_connection((host, port), timeout=5)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: slow\r\n")
                slow.append(s)

            def dribble():  # one header line a second on each, for 30 s at most
                for i in range(30):
                    if stop_dribbling.wait(DRIBBLE_SECONDS):
                        return
                    for s in slow:
                        try:
                            s.sendall(b"X-Dribble-%d: x\r\n" % i)
                        except OSError:
                            pass
            dribbler = threading.Thread(target=dribble, daemon=True)
            dribbler.start()
            time.sleep(2.5)  # every slow client has dribbled twice

            readable, _, _ = select.select(slow, [], [], 0)
            check(not readable, "%d slow clients were answered or closed before their deadline" % len(readable))
            status, body, seconds = timed_request(host, port, "GET", "/health")
            print("health with %d slow clients open: %s in %.3f s" % (SLOW_CLIENTS, status, seconds))
            check(status == 200 and seconds < ANSWER_SECONDS, "/health: %s %r in %.3f s" % (status, body[:200], seconds))
            request = json.dumps({"prompt": "import os", "max_tokens": 4, "temperature": 0})
            status, body, seconds = timed_request(host, port, "POST", "/v1/completions", request)
            print("completion with %d slow clients open: %s in %.3f s" % (SLOW_CLIENTS, status, seconds))
            check(status == 200 and seconds < ANSWER_SECONDS, "completion: %s %r in %.3f s" % (status, body[:200], seconds))
            if status == 200:
                check(json.loads(body)["usage"]["completion_tokens"] == 4, "completion: not 4 tokens: %r" % body)

            # The cap per address: up to it connections are kept, past it refused at once.
            time.sleep(0.3)  # the server has seen the two requests' connections close
            extra = [socket.create_connection((host, port), timeout=5) for _ in range(PER_ADDRESS - SLOW_CLIENTS)]
            readable, _, _ = select.select(extra, [], [], 0.3)
            check(not readable, "%d connections under the cap per address were refused" % len(readable))
            past = socket.create_connection((host, port), timeout=5)
            readable, _, _ = select.select([past], [], [], 1.0)
            answer = past.recv(4096) if readable else b""
            check(answer.startswith(b"HTTP/1.1 429 "), "the connection past the cap per address: %r" % answer[:100])
            for s in extra + [past]:
                s.close()

            start = time.monotonic()
            proc.terminate()
            try:
                code = proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                code = None
            seconds = time.monotonic() - start
            print("SIGTERM with %d slow clients open: exit %s in %.3f s" % (SLOW_CLIENTS, code, seconds))
            check(code == 0, "SIGTERM: exit %s after %.1f s (bound %.0f s)" % (code, seconds, STOP_SECONDS))
            closed = 0
            for s in slow:
                try:
                    s.settimeout(1)
                    closed += s.recv(4096) == b""
                except OSError:
                    closed += 1
            check(closed == len(slow), "SIGTERM: %d of %d slow clients still open" % (len(slow) - closed, len(slow)))
        finally:
            stop_dribbling.set()
            for s in slow:
                s.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if failures:
            print(open(log.name).read(), file=sys.stderr)
    if failures:
        sys.exit("%d failures" % len(failures))
    print("slow clients: all cases passed")


if __name__ == "__main__":
    main()
