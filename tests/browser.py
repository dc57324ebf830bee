"""A headless Chromium driven over the DevTools protocol (``--remote-debugging-pipe``: no port, no
extra package): open a page, wait for what it says about itself, and collect every console
message, uncaught exception and network request on the way, and a screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    """The headless browser to use: $TRACECONV_BROWSER, else the first of BROWSERS on the PATH."""
    named = os.environ.get("TRACECONV_BROWSER")
    if named:
        return named
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageRun:
    """What one page did: its requests, console errors, uncaught exceptions, the value of ``ready``."""

    url: str
    requests: list[str] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)
    value: Any = None
    probed: Any = None
    elapsed_s: float = 0.0
    screenshot: bytes = b""  # the first screen
    full_page: bytes = b""  # the whole page, when asked for

    @property
    def errors(self) -> list[str]:
        logged = [text for level, text in self.console if level in ("error", "assert")]
        return logged + self.exceptions

    @property
    def foreign_requests(self) -> list[str]:
        """Requests for anything but the page itself (inline data: URLs are no requests)."""
        return [u for u in self.requests if u != self.url and not u.startswith("data:")]


class Browser:
    """One headless Chromium process; ``open`` pages in it one after another; ``close`` it."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="traceconv-chromium-")
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def pipes() -> None:  # in the child: fd 3 reads our commands, fd 4 writes its answers
            a = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
        args += [f"--user-data-dir={self.profile}", "--no-first-run", "--no-default-browser-check"]
        args += [f"--window-size={width},{height}", "--hide-scrollbars", "--mute-audio"]
        self.proc = subprocess.Popen(
            args, preexec_fn=pipes, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.size = (width, height)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """One command, and its answer (events that come before it are kept in ``events``)."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        while True:
            answer = self._next()
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            self.events.append(answer)

    def _next(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def open(
        self,
        path: Path,
        ready: str,
        timeout_s: float = 30.0,
        screenshot: bool = True,
        probe: str | None = None,
        full_page: bool = False,
    ) -> PageRun:
        """Load ``path``, poll the JavaScript expression ``ready`` until it is truthy (or ``timeout_s``),
        take the screenshot, then evaluate ``probe`` (clicks, reads of the page) into ``probed``."""
        run = PageRun(url=path.resolve().as_uri())
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.events.clear()
        t0 = time.monotonic()
        self.send("Page.navigate", {"url": run.url}, session)
        while time.monotonic() - t0 < timeout_s:
            run.value = self._evaluate(ready, session)
            if run.value:
                break
            time.sleep(0.02)
        run.elapsed_s = time.monotonic() - t0
        if screenshot:
            shot = self.send("Page.captureScreenshot", {"format": "png"}, session)
            run.screenshot = base64.b64decode(shot["data"])
        if full_page:
            size = self.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1}
            shot = self.send(
                "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}, session
            )
            run.full_page = base64.b64decode(shot["data"])
        if probe:
            run.probed = self._evaluate(probe, session)
        self._collect(run, session)
        self.send("Target.closeTarget", {"targetId": target})
        return run

    def _evaluate(self, expression: str, session: str) -> Any:
        answer = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return answer.get("result", {}).get("value")

    def _collect(self, run: PageRun, session: str) -> None:
        for event in self.events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method", ""), event.get("params", {})
            if method == "Network.requestWillBeSent":
                run.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                run.console.append((params.get("type", ""), text))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                run.exceptions.append(str(details.get("exception", {}).get("description") or details.get("text")))
            elif method == "Log.entryAdded":
                entry = params.get("entry", {})
                run.console.append((entry.get("level", ""), f"{entry.get('text', '')} {entry.get('url', '')}".strip()))

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
