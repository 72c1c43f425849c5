"""Starting the real pig-serve on a free loopback port, and raw HTTP helpers, for the pytest suites.

The server is started with --port 0 and tells its port on stderr ("listening on
http://127.0.0.1:PORT"); a thread keeps reading its stderr (so the pipe never fills) and keeps the
lines for the test's messages. Everything talks to 127.0.0.1 only, and every wait is bounded.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time

PIG_SERVE = os.environ.get("PIG_SERVE", "build/bin/pig-serve")
PIG_RUN = os.environ.get("PIG_RUN", "build/bin/pig-run")
HOST = "127.0.0.1"


class Server:
    def __init__(self, *args, ready_timeout=120):
        # --dense-below 0: the tests' prompts are short, and the measured default would decode
        # their magicpig requests densely; test_serve.py checks that default apart.
        self.args = [PIG_SERVE, "--host", HOST, "--port", "0", "--threads", "2",
                     "--dense-below", "0", *args]
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, errors="replace")
        self.lines = []
        self.port = None
        self._port_seen = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._port_seen.wait(ready_timeout) or self.port is None:
            self.kill()
            raise RuntimeError(f"pig-serve did not start (exit {self.proc.returncode}): "
                               + self.log())
        deadline = time.time() + ready_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pig-serve exited with {self.proc.returncode}: " + self.log())
            try:
                status, _, _ = self.request("GET", "/health", timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("pig-serve never became healthy: " + self.log())

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._port_seen.set()
        self._port_seen.set()  # stderr ended: the server exited (a bad flag) before listening

    def log(self):
        return "\n".join(self.lines[-40:])

    @property
    def base(self):
        return f"http://{HOST}:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=120, raw=None):
        """(status, headers, parsed JSON or text) of one request on a new connection."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            data = raw if raw is not None else (None if body is None else json.dumps(body))
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8")
            ctype = resp.getheader("Content-Type", "")
            parsed = json.loads(text) if "json" in ctype else text
            return resp.status, dict(resp.getheaders()), parsed
        finally:
            conn.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def metrics(self):
        status, _, text = self.request("GET", "/metrics", timeout=10)
        assert status == 200, text
        return self.metrics_from_text(text)

    @staticmethod
    def metrics_from_text(text):
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line:
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def wait_metric(self, name, want, timeout=10):
        """Polls /metrics until `name` equals `want`; returns the last value. A 503 for the
        connection cap (--max-connections) is retried: connections that a test has just closed
        are given back when the server notices their end, which may be after the next poll."""
        deadline = time.time() + timeout
        value = None
        while time.time() < deadline:
            status, _, text = self.request("GET", "/metrics", timeout=10)
            if status == 503 and "max-connections" in str(text):
                time.sleep(0.05)
                continue
            assert status == 200, text
            value = self.metrics_from_text(text).get(name, 0.0)
            if value == want:
                return value
            time.sleep(0.05)
        return value

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def sse_events(resp):
    """The data payloads of a Server-Sent Events response (http.client), up to [DONE]."""
    buf = b""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data: "):
            payload = line[6:].decode("utf-8")
            yield payload
            if payload == "[DONE]":
                return
        buf = line


def stream(server, path, body, timeout=120):
    """Opens a streaming request; returns (connection, response)."""
    conn = http.client.HTTPConnection(HOST, server.port, timeout=timeout)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def pig_run(*args, timeout=300):
    """pig-run's generated text (stdout without the final newline)."""
    out = subprocess.run([PIG_RUN, "--threads", "2", *args], capture_output=True, text=True,
                         timeout=timeout, errors="replace")
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("\n")
    return out.stdout[:-1]
