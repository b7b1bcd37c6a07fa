"""A REST venue for keel's HTTP/1.1 client tests, served by aiohttp (from PyPI, in the
virtualenv scripts/test makes), and a raw TCP server that answers malformed responses.

Prints one line, `http PORT raw PORT`, then serves until killed.

aiohttp routes:
  GET  /api/v3/ticker  fixture JSON with Content-Length and a used-weight header
  GET  /api/v3/depth   fixture JSON sent chunked, in pieces
  GET  /limited        429 with Retry-After: 2
  GET  /slow           answers after 3 s
  POST /order          answers after 3 s (a request that times out at keel)
  GET  /close          answers with Connection: close
  GET  /stats          JSON: requests per path and the connections seen
"""

import asyncio
import json
import sys

from aiohttp import web

TICKER = {"symbol": "BTCUSDT", "price": "64000.12", "volume": "1234.5"}
DEPTH = {
    "lastUpdateId": 1027024,
    "bids": [["4.00000000", "431.00000000"]] * 40,
    "asks": [["4.00000200", "12.00000000"]] * 40,
}

requests = {}
connections = set()
weight = 0


def count(request):
    global weight
    requests[request.path] = requests.get(request.path, 0) + 1
    peer = request.transport.get_extra_info("peername") if request.transport else None
    connections.add(str(peer))
    weight += 1


async def ticker(request):
    count(request)
    return web.json_response(TICKER, headers={"X-MBX-USED-WEIGHT-1M": str(weight)})


async def depth(request):
    count(request)
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    text = json.dumps(DEPTH).encode()
    for i in range(0, len(text), 700):
        await resp.write(text[i : i + 700])
    await resp.write_eof()
    return resp


async def limited(request):
    count(request)
    return web.Response(status=429, text="slow down", headers={"Retry-After": "2"})


async def slow(request):
    count(request)
    await asyncio.sleep(3)
    return web.json_response({"late": True})


async def close(request):
    count(request)
    return web.Response(text="bye", headers={"Connection": "close"})


async def stats(request):
    return web.json_response({"requests": requests, "connections": len(connections)})


async def raw(reader, writer):
    """Answers every request with a response that has both framings (a smuggling shape)."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello")
    await writer.drain()
    await asyncio.sleep(5)
    writer.close()


async def main():
    app = web.Application()
    app.router.add_get("/api/v3/ticker", ticker)
    app.router.add_get("/api/v3/depth", depth)
    app.router.add_get("/limited", limited)
    app.router.add_get("/slow", slow)
    app.router.add_post("/order", slow)
    app.router.add_get("/close", close)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    raw_server = await asyncio.start_server(raw, "127.0.0.1", 0)
    raw_port = raw_server.sockets[0].getsockname()[1]
    print(f"http {port} raw {raw_port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
