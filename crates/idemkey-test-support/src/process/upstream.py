"""A small, non-idempotent HTTP API in Python, for idemkey proxy's tests.

POST /items creates an item on every call (no deduplication of its own), unless
`?dedup=1` is given: then it deduplicates on the `Idempotency-Derived-Key` header, as an
upstream with deduplication of its own would. Each credential (`Authorization`) sees its own
items. Prints `listening on PORT` first.

  POST /items                {"title": STRING}  -> 201 {"id", "title"}, 400 without a title
  POST /items?delay_ms=N     the same, answered after N ms
  POST /items?die=1          creates the item, then closes the connection mid-response
  POST /items?hold=NAME      waits (before creating) until GET /release?name=NAME
  POST with `X-Fail: 1`      500, creates nothing
  POST /items?big=N          the item, with a "padding" of N bytes in its answer
  GET  /items                -> 200 {"items": [...]} of the caller
  GET  /stats                -> 200 {"created", "held", "derived_keys", "forwarded_for"}
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOCK = threading.Lock()
ITEMS = []  # (owner, item)
BY_DERIVED_KEY = {}
STATS = {"created": 0, "held": 0, "derived_keys": [], "forwarded_for": []}
HOLDS = {}


def hold(name):
    """Blocks until /release?name=NAME, counting the requests held meanwhile."""
    with LOCK:
        event = HOLDS.setdefault(name, threading.Event())
        STATS["held"] += 1
    event.wait(60)
    with LOCK:
        STATS["held"] -= 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, document, headers=()):
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = urlparse(self.path).path
        owner = self.headers.get("Authorization", "")
        with LOCK:
            if path == "/items":
                mine = [item for who, item in ITEMS if who == owner]
                return self.reply(200, {"items": mine})
            if path == "/stats":
                return self.reply(200, STATS)
            if path == "/release":
                name = parse_qs(urlparse(self.path).query)["name"][0]
                HOLDS.setdefault(name, threading.Event()).set()
                return self.reply(200, {"released": name})
        self.reply(404, {"error": "not found"})

    def do_POST(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if url.path != "/items":
            return self.reply(404, {"error": "not found"})
        try:
            title = json.loads(raw)["title"]
        except (ValueError, KeyError, TypeError):
            return self.reply(400, {"error": "title is required"})
        if self.headers.get("X-Fail"):
            return self.reply(500, {"error": "failed as asked"})
        if query.get("hold"):
            hold(query["hold"][0])
        delay = int(query.get("delay_ms", ["0"])[0])
        if delay:
            time.sleep(delay / 1000)
        derived = self.headers.get("Idempotency-Derived-Key")
        with LOCK:
            STATS["derived_keys"].append(derived)
            STATS["forwarded_for"].append(self.headers.get("X-Forwarded-For"))
            if query.get("dedup") and derived in BY_DERIVED_KEY:
                item = BY_DERIVED_KEY[derived]
            else:
                STATS["created"] += 1
                item = {"id": str(STATS["created"]), "title": title}
                ITEMS.append((self.headers.get("Authorization", ""), item))
                if derived:
                    BY_DERIVED_KEY[derived] = item
        if query.get("die"):
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"id": "')
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        answer = dict(item)
        if query.get("big"):
            answer["padding"] = "x" * int(query["big"][0])
        self.reply(201, answer, [("Location", "/items/" + item["id"])])


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    server.daemon_threads = True
    print("listening on", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
