"""A minfer-server process for the tests: 127.0.0.1 on a free port, waited for until /health
answers 200, stopped at the end (terminate, then kill). Every wait is bounded."""
import http.client
import json
import subprocess
import sys
import tempfile
import time

from checks import check, failures, finish  # noqa: F401 (the server scripts take them from here)


class Server:
    """A minfer-server on 127.0.0.1, a free port; stop() always ends it."""

    def __init__(self, server_bin, config, model, args, env=None):
        self.log = tempfile.TemporaryFile()  # its stderr: a pipe nobody reads would fill and stall it
        self.p = subprocess.Popen([server_bin, "--config", config, "-m", model, "--host", "127.0.0.1", "--port", "0"] + args,
                                  stdout=subprocess.PIPE, stderr=self.log, env=env)
        line = self.p.stdout.readline().decode()  # the first line names the port (bounded by the process exiting)
        if "listening on http://127.0.0.1:" not in line:
            self.stop()
            raise RuntimeError(f"no listening line: {line!r} {self.stderr()[-400:]}")
        self.port = int(line.strip().rsplit(":", 1)[1])
        deadline = time.time() + 60
        while time.time() < deadline:
            status, _ = self.get("/health")
            if status == 200:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("/health never answered 200 within 60 s")

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
            c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
            r = c.getresponse()
            raw = r.read().decode("utf-8")
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw
        finally:
            c.close()

    def exchange(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers with lower-case names, body text) of one request."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8")
        finally:
            c.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body, headers=None):
        """The data: events of a streamed response, parsed (the last is the string [DONE])."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request("POST", path, body=json.dumps(dict(body, stream=True)), headers=headers or {"Content-Type": "application/json"})
            r = c.getresponse()
            text = r.read().decode("utf-8")
            self.last_stream = text  # the raw body, for framing checks
            events = []
            for block in text.split("\n\n"):
                if block.startswith("data: "):
                    payload = block[len("data: "):]
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
            return r.status, r.getheader("Content-Type"), events
        finally:
            c.close()

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)
        return self.p.returncode


def metric(s, name, headers=None):
    """A value of minfer:NAME from GET /metrics (None when absent)."""
    status, text = s.get("/metrics", headers=headers)
    for line in text.splitlines() if status == 200 else []:
        if line.startswith(f"minfer:{name} "):
            return float(line.split()[1])
    return None
