#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol (CDP) to read a live page's DOM.

    page_watch.py CHROMIUM URL PROFILE_DIR

It opens URL once and keeps it open (the page updates itself from server-sent events), then
reads commands on stdin, one per line, and answers each on stdout with one line:

    text SELECTOR          -> the element's textContent, or "<none>"
    wait SELECTOR TEXT S   -> "ok" once the element's text is TEXT, "timeout <last>" after S s
    shot PATH              -> "ok" after writing a PNG screenshot to PATH
    quit

Used by core/tests/observability.rs; needs the `websockets` package (scripts/test's .venv).
"""

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

import websockets


async def main():
    chromium, url, profile = sys.argv[1:4]
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--window-size=1500,700", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.time() > deadline:
                raise SystemExit("chromium did not start its DevTools server")
            await asyncio.sleep(0.05)
        port = open(port_file).read().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        async with websockets.connect(page["webSocketDebuggerUrl"], max_size=64 << 20) as ws:
            ids = iter(range(1, 1 << 30))

            async def call(method, **params):
                i = next(ids)
                await ws.send(json.dumps({"id": i, "method": method, "params": params}))
                while True:
                    msg = json.loads(await ws.recv())
                    if msg.get("id") == i:
                        if "error" in msg:
                            raise RuntimeError(f"{method}: {msg['error']}")
                        return msg["result"]

            async def text(selector):
                expr = f"(e => e ? e.textContent : '<none>')(document.querySelector({json.dumps(selector)}))"
                r = await call("Runtime.evaluate", expression=expr, returnByValue=True)
                return r["result"].get("value", "<none>")

            await call("Page.enable")
            await call("Page.navigate", url=url)
            print("ready", flush=True)
            loop = asyncio.get_running_loop()
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    break
                words = line.split()
                if not words:
                    continue
                if words[0] == "quit":
                    break
                if words[0] == "text":
                    print(await text(words[1]), flush=True)
                elif words[0] == "wait":
                    selector, want, seconds = words[1], words[2], float(words[3])
                    end = time.time() + seconds
                    last = await text(selector)
                    while last != want and time.time() < end:
                        await asyncio.sleep(0.1)
                        last = await text(selector)
                    print("ok" if last == want else f"timeout {last}", flush=True)
                elif words[0] == "shot":
                    r = await call("Page.captureScreenshot", format="png")
                    with open(words[1], "wb") as f:
                        f.write(base64.b64decode(r["data"]))
                    print("ok", flush=True)
                else:
                    print(f"unknown {words[0]}", flush=True)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
