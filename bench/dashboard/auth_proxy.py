#!/usr/bin/env python3
"""A loopback proxy that adds `Authorization: Bearer <token>` to every request: gpuwatch refuses
remote-write without its write or admin token (docs/limits.md), and bench/store/rw_load sends
none. Used for the load only, never for a timed request.

  auth_proxy.py LISTEN_PORT UPSTREAM_BASE TOKEN_FILE

HTTP/1.1 keep-alive on both sides: one upstream connection per client connection (rw_load's
shards each keep one), bodies by Content-Length, the upstream's status and body passed back.
"""
import http.client
import http.server
import sys
import urllib.parse

PORT, UPSTREAM, TOKEN_FILE = int(sys.argv[1]), sys.argv[2], sys.argv[3]
TOKEN = open(TOKEN_FILE).read().strip()
UP = urllib.parse.urlsplit(UPSTREAM)
HOP = {"connection", "keep-alive", "transfer-encoding", "host", "authorization"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        if not hasattr(self, "up"):
            self.up = http.client.HTTPConnection(UP.hostname, UP.port, timeout=300)
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Authorization"] = "Bearer " + TOKEN
        try:
            self.up.request(self.command, self.path, body=body, headers=headers)
            r = self.up.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self.up.close()
            self.up = http.client.HTTPConnection(UP.hostname, UP.port, timeout=300)
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET = forward


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
