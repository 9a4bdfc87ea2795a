"""A headless Chromium driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`): no websocket
library, no browser download — Debian's `chromium` package, started the way this machine needs it.

Protocol: JSON messages terminated by NUL, written to the browser's fd 3 and read from its fd 4; a page is a target
attached with `flatten`, so its commands carry the session id. Each `Page` collects, from the moment it opens,
every console error (`Runtime.consoleAPICalled` of type error, `Runtime.exceptionThrown`, `Log.entryAdded` of level
error — where Chromium reports Content-Security-Policy violations) and the URL of every request
(`Network.requestWillBeSent`).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

EXECUTABLE = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--mute-audio", "--remote-debugging-pipe")
TIMEOUT_S = 30.0


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, executable: str = EXECUTABLE):
        if not (Path(executable).exists() and os.access(executable, os.X_OK)):
            raise BrowserError(f"{executable} not found: install Debian's chromium package (README test command)")
        self.profile = tempfile.mkdtemp(prefix="narrowpath-chromium-")
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def fds() -> None:  # in the child: the protocol pipes become fd 3 (commands in) and fd 4 (replies out)
            hi_in = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)  # out of the way first: either may already be 3 or 4
            hi_out = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(hi_in, 3)  # dup2 makes the copies inheritable
            os.dup2(hi_out, 4)

        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=fds, close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            m = self._read(deadline)
            if m.get("id") == self._next:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, session: str, since: int = 0) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            for e in self.events[since:]:
                if e.get("method") == method and e.get("sessionId") == session:
                    return e
            since = len(self.events)
            self.events.append(self._read(deadline))

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise BrowserError("chromium did not answer" if left <= 0 else "chromium exited")
            ready, _, _ = select.select([self._r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium closed the pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def page(self, width: int, height: int, mobile: bool = False) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, target, session, width, height, mobile)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, target: str, session: str, width: int, height: int, mobile: bool):
        self.b, self.target, self.session = browser, target, session
        self.first_event = len(browser.events)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.cmd(f"{domain}.enable")
        self.cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": mobile})

    def cmd(self, method: str, params: dict | None = None) -> dict:
        return self.b.send(method, params, self.session)

    def goto(self, url: str) -> None:
        mark = len(self.b.events)
        self.cmd("Page.navigate", {"url": url})
        self.b.wait_event("Page.loadEventFired", self.session, mark)

    def eval(self, expression: str):
        r = self.cmd("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, full_page: bool = True) -> bytes:
        params = {"format": "png"}
        if full_page:
            size = self.cmd("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                            "height": min(size["height"], 16000), "scale": 1})
        return base64.b64decode(self.cmd("Page.captureScreenshot", params)["data"])

    def _mine(self) -> list[dict]:
        return [e for e in self.b.events[self.first_event:] if e.get("sessionId") == self.session]

    def console_errors(self) -> list[str]:
        out = []
        for e in self._mine():
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                out.append(p.get("exceptionDetails", {}).get("text", "exception"))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self._mine() if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        self.b.send("Target.closeTarget", {"targetId": self.target})
