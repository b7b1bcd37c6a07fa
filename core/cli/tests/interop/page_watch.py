#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol (CDP) to read a live page's DOM.

    page_watch.py CHROMIUM URL PROFILE_DIR [SELECTOR...]

Each SELECTOR given is watched (see `watch`) from the page's first load on.

It opens URL once and keeps it open (the page updates itself from server-sent events), then
reads commands on stdin, one per line, and answers each on stdout with one line:

    text SELECTOR          -> the element's textContent, or "<none>"
    wait SELECTOR TEXT S   -> "ok" once the element's text is TEXT, "timeout <last>" after S s
    watch SELECTOR         -> "ok"; from now on every text the element shows is recorded (a
                              MutationObserver in the page, so no state is missed between
                              two looks); watching it again starts a fresh record
    seen SELECTOR TEXT S   -> "ok" once the watched element has ever shown TEXT (watching it
                              from now if it was not), "timeout <texts seen>" after S s
    eval S EXPRESSION...   -> "ok <JSON value>" once EXPRESSION (JavaScript, the rest of the
                              line) is truthy, "timeout <JSON value>" after S s
    load S                 -> loads URL again; "ok <title>" once it shows the live page's
                              table, "timeout <its text>" after S s
    shot PATH              -> "ok" after writing a PNG screenshot to PATH
    quit

Used by core/cli/tests/observability.rs; needs the `websockets` package (scripts/test's .venv).
"""

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import websockets


# Records every text the watched elements show: a MutationObserver runs after each change the
# page makes, so a state the page passes through between two of the test's looks is kept.
WATCH = """((sel, reset) => {
  const w = window.__keelWatch || (window.__keelWatch = { seen: {}, observer: null });
  const record = () => {
    for (const [s, texts] of Object.entries(w.seen)) {
      const e = document.querySelector(s);
      if (e) texts.add(e.textContent);
    }
  };
  if (reset || !w.seen[sel]) w.seen[sel] = new Set();
  if (!w.observer) {
    w.observer = new MutationObserver(record);
    w.observer.observe(document, { subtree: true, childList: true, characterData: true });
  }
  record();
  return true;
})(%s, %s)"""


def die_with_parent():
    """In the child before exec: the kernel kills Chromium when this driver dies, however it
    dies (a test that fails kills the driver with SIGKILL, and `finally` never runs)."""
    import ctypes
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


async def main():
    chromium, url, profile = sys.argv[1:4]
    early = sys.argv[4:]
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--window-size=1500,700", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
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

            async def value(expr):
                r = await call("Runtime.evaluate", expression=expr, returnByValue=True)
                return r["result"].get("value")

            async def until(expr, seconds):
                end = time.time() + seconds
                last = await value(expr)
                while not last and time.time() < end:
                    await asyncio.sleep(0.1)
                    last = await value(expr)
                return bool(last), last

            def watch(selector, reset):
                return WATCH % (json.dumps(selector), json.dumps(reset))

            await call("Page.enable")
            if early:
                source = ";".join(watch(sel, False) for sel in early)
                await call("Page.addScriptToEvaluateOnNewDocument", source=source)
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
                elif words[0] == "watch":
                    await value(watch(words[1], True))
                    print("ok", flush=True)
                elif words[0] == "seen":
                    selector, want, seconds = words[1], words[2], float(words[3])
                    await value(watch(selector, False))
                    texts = f"[...window.__keelWatch.seen[{json.dumps(selector)}]]"
                    ok, _ = await until(f"{texts}.includes({json.dumps(want)})", seconds)
                    print("ok" if ok else f"timeout {json.dumps(await value(texts))}", flush=True)
                elif words[0] == "eval":
                    expr = line.split(None, 2)[2]
                    ok, last = await until(expr, float(words[1]))
                    print(("ok " if ok else "timeout ") + json.dumps(last), flush=True)
                elif words[0] == "load":
                    await call("Page.navigate", url=url)
                    ok, _ = await until(
                        "document.readyState === 'complete' && !!document.querySelector('#venues')",
                        float(words[1]))
                    shown = await value("document.title" if ok else
                                        "document.body ? document.body.innerText.slice(0, 200) : ''")
                    print(("ok " if ok else "timeout ") + json.dumps(shown), flush=True)
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
