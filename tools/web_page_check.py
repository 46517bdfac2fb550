#!/usr/bin/env python3
"""Opens the web example (examples/web/index.html) in headless Chromium, waits until the page has
finished generating, and prints what it shows as one JSON object: {"text": the generated text as
the page holds it, "status": the status line}. Optionally saves a screenshot.

Chromium is driven over the DevTools protocol through a pipe (--remote-debugging-pipe: JSON
messages ending in a NUL byte on file descriptors 3 and 4), so nothing beyond Python's standard
library and Chromium is needed. The page must be served over HTTP (a Web Worker does not start
from file://):

    python3 tools/web_page_check.py --url 'http://127.0.0.1:8000/examples/web/?prompt=ROMEO:&seed=7&n=200&run=1'
"""
import argparse
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Chromium:
    """A headless Chromium and one page in it, spoken to over the DevTools pipe."""

    def __init__(self, binary, width, height):
        to_chromium_r, to_chromium_w = os.pipe()
        from_chromium_r, from_chromium_w = os.pipe()
        # The child's fds 3 and 4 must be these pipes; copies above 10 cannot be overwritten by
        # the dup2 calls that put them there.
        child_in, child_out = fcntl.fcntl(to_chromium_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_chromium_w, fcntl.F_DUPFD, 10)
        self.profile = tempfile.mkdtemp(prefix="gpt2-web-chromium-")
        # --no-sandbox: CI runs as root; --disable-dev-shm-usage: containers have a small /dev/shm
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"]

        def give_pipes():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=give_pipes, pass_fds=(3, 4))
        for fd in (to_chromium_r, from_chromium_w, child_in, child_out):
            os.close(fd)
        self.writer, self.reader = os.fdopen(to_chromium_w, "wb", buffering=0), os.fdopen(from_chromium_r, "rb", buffering=0)
        self.buffer, self.next_id, self.session = b"", 0, None

    def call(self, method, params=None, timeout=30):
        """Sends one command and returns its result; events that arrive meanwhile are dropped."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        self.writer.write(json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Chromium did not answer {method} within {timeout} s")
                chunk = self.reader.read(65536)
                if not chunk:
                    raise RuntimeError(f"Chromium exited (code {self.process.poll()}) during {method}")
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply["result"]

    def open(self, url):
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def close(self):
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the page, served over HTTP, with run=1 in its query so that it starts by itself")
    parser.add_argument("--chromium", default="chromium", help="the Chromium program (default: chromium)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for the page to finish (default 120)")
    parser.add_argument("--screenshot", help="save a PNG of the finished page here")
    parser.add_argument("--size", default="900x600", help="window size WIDTHxHEIGHT of the screenshot (default 900x600)")
    args = parser.parse_args()
    binary = shutil.which(args.chromium)
    if not binary:
        sys.exit(f"web_page_check: {args.chromium} not found (Debian: apt-get install chromium)")
    try:
        width, height = (int(v) for v in args.size.split("x"))
    except ValueError:
        sys.exit(f"web_page_check: --size expects WIDTHxHEIGHT, got '{args.size}'")

    browser = Chromium(binary, width, height)
    try:
        browser.open(args.url)
        deadline = time.monotonic() + args.timeout
        while browser.evaluate("document.getElementById('output')?.dataset.done === 'true'") is not True:
            if time.monotonic() > deadline:
                status = browser.evaluate("document.getElementById('status')?.textContent")
                sys.exit(f"web_page_check: the page did not finish within {args.timeout} s; its status: {status!r}")
            time.sleep(0.2)
        page = browser.evaluate("({text: document.getElementById('generated').textContent, status: document.getElementById('status').textContent})")
        if args.screenshot:
            png = browser.call("Page.captureScreenshot", {"format": "png"})["data"]
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(png))
        print(json.dumps(page))
    except (TimeoutError, RuntimeError) as e:
        sys.exit(f"web_page_check: {e}")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
