"""Open a page in headless Chromium as a person would, over the DevTools protocol on a pipe.

`chromium --remote-debugging-pipe` reads protocol commands on fd 3 and writes replies and
events on fd 4, each message one JSON text ended by a NUL byte: no websocket client, no port.
`inspect_page` loads a file, collects console errors and uncaught exceptions, checks that every
image loaded (the visible <img> elements and every image data URL the page carries, decoded by
the browser itself), and takes a PNG screenshot.

    python tests/framework/headless_chromium.py REPORT.html SHOT.png [--width 1400 --height 2000]
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")

# Every image of the page: the <img> elements with a source, and the image extras pytest-html
# keeps in its data blob (its viewer shows one per test at a time), each decoded by the browser.
CHECK_IMAGES = r"""
(async () => {
  const load = (src) => new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve({src: src.slice(0, 60), width: img.naturalWidth});
    img.onerror = () => resolve({src: src.slice(0, 60), width: 0});
    img.src = src;
  });
  const shown = [...document.querySelectorAll('img')]
    .filter((img) => img.getAttribute('src'))
    .map((img) => ({src: img.src.slice(0, 60), width: img.complete ? img.naturalWidth : 0}));
  const container = document.getElementById('data-container');
  const blob = container ? JSON.parse(container.dataset.jsonblob) : {tests: {}};
  const sources = [];
  for (const results of Object.values(blob.tests || {}))
    for (const result of results)
      for (const extra of result.extras || [])
        if (extra.format_type === 'image') sources.push(extra.content);
  const decoded = await Promise.all(sources.map(load));
  return {shown, decoded, rows: document.querySelectorAll('tbody.results-table-row').length,
          title: document.title, text: document.body.innerText.slice(0, 20000)};
})()
"""


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclasses.dataclass
class PageCheck:
    console_errors: list[str]
    shown_images: list[dict]
    decoded_images: list[dict]
    rows: int
    title: str
    text: str
    screenshot: Path | None

    @property
    def broken_images(self) -> list[dict]:
        return [i for i in self.shown_images + self.decoded_images if not i["width"]]


class _Pipe:
    def __init__(self, browser: str, profile: str) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def wire():  # in the child: the protocol's fds 3 (commands in) and 4 (replies out)
            # Copies first, above 4: a pipe end may itself be fd 3 or 4, and dup2 onto the same
            # number would keep its close-on-exec flag.
            a, b = os.dup(to_r), os.dup(from_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=wire, close_fds=False)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe: " +
                                   self.proc.stderr.read().decode(errors="replace")[-2000:])
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            os.write(self._to_w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_w, self._from_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.stderr.close()


def inspect_page(page: Path, screenshot: Path | None = None, width: int = 1400,
                 height: int = 2000, expand_first: int = 0, browser: str | None = None) -> PageCheck:
    """Load `page`, report console errors and images that did not load; screenshot the top
    `width` x `height` pixels after expanding the first `expand_first` collapsed rows."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no chromium binary (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="hil-chromium-") as profile:
        pipe = _Pipe(browser, profile)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target,
                                                          "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1,
                       "mobile": False}, session=session)
            pipe.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
            pipe.wait_event("Page.loadEventFired", timeout=120)
            result = pipe.send("Runtime.evaluate", {"expression": CHECK_IMAGES,
                                                    "awaitPromise": True,
                                                    "returnByValue": True},
                               session=session, timeout=120)
            if "exceptionDetails" in result:
                raise RuntimeError(f"page check script failed: {result['exceptionDetails']}")
            value = result["result"]["value"]
            if expand_first:
                pipe.send("Runtime.evaluate", {"expression": (
                    "[...document.querySelectorAll('tbody.results-table-row .col-result.collapsed')]"
                    f".slice(0, {int(expand_first)}).forEach((c) => c.click())")}, session=session)
            shot = None
            if screenshot is not None:
                pipe.send("Runtime.evaluate", {"expression": "new Promise(r => setTimeout(r, 300))",
                                               "awaitPromise": True}, session=session)
                data = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(data["data"]))
                shot = screenshot
            errors = []
            for event in pipe.events:
                method, params = event.get("method"), event.get("params", {})
                if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                         for a in params.get("args", [])))
                elif method == "Runtime.exceptionThrown":
                    details = params.get("exceptionDetails", {})
                    errors.append("exception: " + str(details.get("exception", {}).get(
                        "description", details.get("text"))))
                elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                    entry = params["entry"]
                    errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        finally:
            pipe.close()
    return PageCheck(errors, value["shown"], value["decoded"], value["rows"], value["title"],
                     value["text"], shot)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("screenshot", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2000)
    parser.add_argument("--expand", type=int, default=0, help="expand the first N collapsed rows")
    args = parser.parse_args(argv)
    check = inspect_page(args.page, args.screenshot, args.width, args.height, args.expand)
    print(f"{check.rows} result rows; {len(check.shown_images)} shown and "
          f"{len(check.decoded_images)} embedded images; broken: {check.broken_images}; "
          f"console errors: {check.console_errors}; screenshot {check.screenshot}")
    return 1 if check.broken_images or check.console_errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
