"""Helpers for the bench scripts that drive pig-serve on 127.0.0.1: start a server on port 0 and
wait until it is healthy (bounded), plain HTTP requests, /metrics as numbers, a bounded stop."""
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"


def request(port, method, path, body=None, timeout=600):
    """(status, body text) of one request on its own connection."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def metrics(port):
    """/metrics as {series: value}."""
    _, text = request(port, "GET", "/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def start(cmd, ready_s=120):
    """Starts `cmd` (a pig-serve command line with --port 0); returns (process, port) once it
    answers /health; exits with a message when it never listens within ready_s."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + ready_s
    for line in proc.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
        if time.time() > deadline:
            break
    if port is None:
        proc.kill()
        sys.exit(f"{cmd[0]} never listened")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    while time.time() < deadline:
        try:
            if request(port, "GET", "/health", timeout=5)[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    return proc, port


def stop(proc, grace_s=30):
    """SIGTERM, then SIGKILL after grace_s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
