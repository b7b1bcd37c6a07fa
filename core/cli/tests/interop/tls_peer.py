"""Python TLS peers for keel's TLS tests (PyPI packages from the virtualenv scripts/test
makes), by the first argument:

  https CERTDIR          an aiohttp HTTPS server with CERTDIR/server.pem and server.key;
                         prints `https PORT`, serves GET /hello (JSON) and POST /echo (the body
                         back), until killed.
  get URL CAFILE         httpx GET with verify=CAFILE (`system`: the default public roots); prints `status STATUS BODY` or
                         `error TYPE: MESSAGE`.
  wss URL CAFILE         websockets client with an ssl context trusting CAFILE: subscribes to
                         the book of AAPL and prints `message JSON` for the first message, or
                         `error TYPE: MESSAGE`.
"""

import asyncio
import json
import ssl
import sys


async def https(certdir):
    from aiohttp import web

    async def hello(request):
        return web.json_response({"hello": "keel", "tls": request.secure})

    async def echo(request):
        return web.Response(body=await request.read())

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_get("/hello", hello)
    app.router.add_post("/echo", echo)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certdir + "/server.pem", certdir + "/server.key")
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print("https", port, flush=True)
    await asyncio.Event().wait()


def get(url, cafile):
    import httpx

    try:
        r = httpx.get(url, verify=True if cafile == "system" else cafile, timeout=10)
        print("status", r.status_code, r.text.replace("\n", " "), flush=True)
    except Exception as e:  # the test reads the type and message
        print("error", type(e).__name__ + ":", str(e).replace("\n", " "), flush=True)


async def wss(url, cafile):
    import websockets

    ctx = ssl.create_default_context(cafile=cafile)
    try:
        async with websockets.connect(url, ssl=ctx, open_timeout=10) as ws:
            await ws.send(json.dumps({"op": "subscribe", "channel": "book", "symbol": "AAPL"}))
            message = await asyncio.wait_for(ws.recv(), 10)
            print("message", message.replace("\n", " "), flush=True)
    except Exception as e:
        print("error", type(e).__name__ + ":", str(e).replace("\n", " "), flush=True)


def main():
    what = sys.argv[1]
    if what == "https":
        asyncio.run(https(sys.argv[2]))
    elif what == "get":
        get(sys.argv[2], sys.argv[3])
    elif what == "wss":
        asyncio.run(wss(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("unknown mode " + what)


main()
