#!/usr/bin/python3
"""Local servers for the registry tests (tests/e2e/registry_*.sh), on loopback.

  token PORT KEY CERT ISSUER USER PASSWORD REFRESH_TOKEN LOG
      A Docker token server: GET /token?service=S&scope=repository:R:pull,push
      with Basic USER:PASSWORD gets a JWT signed by KEY (x5c: CERT) granting
      the scope; anonymous requests get 401, except for repositories under
      public/ (pull only). The OAuth2 form of docs/spec/auth/oauth.md, a POST
      of grant_type=refresh_token&refresh_token=REFRESH_TOKEN&service&scope,
      gets an access_token for USER; another refresh token gets 400
      invalid_grant. Each request is logged to LOG as "METHOD GRANT AUTH"
      (GRANT: the grant_type or "-"; AUTH: "basic", "bearer" or "none").
  proxy PORT UPSTREAM BLOB_HOST_URL
      In front of a registry (UPSTREAM, http://127.0.0.1:N). The first
      component of the repository picks a fault, and is taken off before the
      request goes on (so /v2/cut/t/app/... reaches the registry as /v2/t/app/...):
        ok        forward as is
        redirect  blobs answer 307 to BLOB_HOST_URL/blob/DIGEST (another host)
        cut       a blob's response stops after half its bytes, then the connection closes
        corrupt   a blob's bytes are changed (one byte flipped in the middle)
        loop      blobs redirect to each other, forever
        big       manifests are 5 MiB of JSON
        badjson   manifests are not JSON
        forbidden everything is 403
        noblob    blobs are 404
        busy      the first request of each path answers 503 with Retry-After: 1
        hang      requests for manifests get no answer
  blobs PORT REGISTRY_ROOT LOG
      Serves /blob/sha256:HEX from the registry's storage directory, and logs
      each request's Authorization header (or "none") to LOG.
"""
import base64
import http.client
import http.server
import json
import os
import socketserver
import sys
import threading
import time
import urllib.parse


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True



def serve(server):
    """Serves on the bound port, said first on stdout ("listening PORT"):
    with port 0 the kernel picks a free one, so no other process can take
    it between a test choosing it and the server binding it."""
    print("listening", server.server_address[1], flush=True)
    server.serve_forever()

def token_server(port, key_file, cert_file, issuer, user, password, refresh_token, log_file):
    import jwt
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = open(key_file, "rb").read()
    cert = x509.load_pem_x509_certificate(open(cert_file, "rb").read())
    x5c = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
    want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def log_request_kind(self, grant):
            auth = (self.headers.get("Authorization") or "none").split(" ")[0].lower()
            with open(log_file, "a") as f:
                f.write(f"{self.command} {grant} {auth}\n")

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(min(length, 1 << 16)).decode())
            grant = form.get("grant_type", ["-"])[0]
            self.log_request_kind(grant)
            if grant != "refresh_token" or form.get("refresh_token", [""])[0] != refresh_token:
                body = b'{"error":"invalid_grant"}'
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.grant(form, True, oauth=True)

        def do_GET(self):
            q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            self.log_request_kind("-")
            self.grant(q, self.headers.get("Authorization") == want)

        def grant(self, q, authed, oauth=False):
            access = []
            for scope in q.get("scope", []):
                parts = scope.split(":")
                if len(parts) != 3 or parts[0] != "repository":
                    continue
                name = parts[1]
                if authed:
                    actions = parts[2].split(",")
                elif name.startswith("public/"):
                    actions = ["pull"]
                else:
                    continue
                # The fault proxy takes the first component off: grant both names.
                access.append({"type": "repository", "name": name, "actions": actions})
                if "/" in name:
                    access.append({"type": "repository", "name": name.split("/", 1)[1], "actions": actions})
            if not authed and (self.headers.get("Authorization") or not access):
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"details":"unauthorized"}')
                return
            now = int(time.time())
            claims = {"iss": issuer, "sub": user if authed else "", "aud": q.get("service", [""])[0],
                      "exp": now + 600, "nbf": now - 10, "iat": now, "jti": str(now) + str(id(self)),
                      "access": access}
            token = jwt.encode(claims, key, algorithm="RS256", headers={"x5c": x5c})
            # OAuth2 answers carry access_token only, as real token servers do.
            answer = {"access_token": token, "expires_in": 600} if oauth else \
                {"token": token, "access_token": token, "expires_in": 600}
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    serve(Server(("127.0.0.1", port), H))


def proxy_server(port, upstream, blob_host):
    up = urllib.parse.urlparse(upstream)
    seen = set()
    lock = threading.Lock()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def forward(self, path):
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, path, headers=headers)
            return conn, conn.getresponse()

        def do_GET(self):
            self.handle_any()

        def do_HEAD(self):
            self.handle_any()

        def handle_any(self):
            path = self.path
            if path.startswith("/elsewhere/"):
                # Another origin (localhost, not 127.0.0.1) that wants credentials.
                return self.reply(401, b"", [("WWW-Authenticate", 'Basic realm="elsewhere"')])
            if not path.startswith("/v2/") or path == "/v2/":
                conn, r = self.forward(path)
                body = r.read()
                self.reply(r.status, body, [(k, v) for k, v in r.getheaders()
                                            if k.lower() not in ("content-length", "connection", "transfer-encoding")])
                return
            rest = path[4:]
            fault, _, rest = rest.partition("/")
            path = "/v2/" + rest
            kind = "blobs" if "/blobs/" in path else "manifests" if "/manifests/" in path else "other"
            digest = path.split("?")[0].rsplit("/", 1)[-1]
            if fault == "forbidden":
                return self.reply(403, b'{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}',
                                  [("Content-Type", "application/json")])
            if fault == "busy":
                with lock:
                    first = path not in seen
                    seen.add(path)
                if first:
                    return self.reply(503, b"busy", [("Retry-After", "1")])
            if fault == "hang" and kind == "manifests":
                time.sleep(3600)
                return
            if kind == "blobs" and fault == "noblob":
                return self.reply(404, b'{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}',
                                  [("Content-Type", "application/json")])
            if kind == "blobs" and fault == "redirect":
                return self.reply(307, b"", [("Location", f"{blob_host}/blob/{digest}")])
            if kind == "blobs" and fault == "elsewhere401":
                return self.reply(307, b"", [("Location", f"http://localhost:{port}/elsewhere/{digest}")])
            if kind == "blobs" and fault == "chain":
                # Twenty redirects, each to a new URL: a chain, not a loop.
                base, _, q = self.path.partition("?")
                n = int(q[1:]) if q.startswith("n") else 0
                return self.reply(302, b"", [("Location", base + "?n" + str(n + 1))])
            if kind == "blobs" and fault == "loop":
                base = self.path.split("?")[0]
                return self.reply(302, b"", [("Location", base + ("?a" if self.path.endswith("?b") else "?b"))])
            conn, r = self.forward(path)
            headers = [(k, v) for k, v in r.getheaders()
                       if k.lower() not in ("content-length", "connection", "transfer-encoding")]
            if r.status != 200:
                return self.reply(r.status, r.read(), headers)
            if fault == "trickle" and kind == "manifests":
                # The real manifest at 2 bytes a second (a slowloris).
                body = r.read()
                self.send_response(200)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(0, len(body), 2):
                    self.wfile.write(body[i:i + 2])
                    self.wfile.flush()
                    time.sleep(1)
                return
            if fault in ("endless", "huge") and kind == "blobs" and int(r.getheader("Content-Length")) < 64 << 10:
                # The config, whose descriptor says a few hundred bytes: its
                # bytes, then zeros without end and no Content-Length
                # ("endless"), or a Content-Length of a terabyte ("huge").
                body = r.read()
                self.send_response(200)
                for k, v in headers:
                    self.send_header(k, v)
                if fault == "huge":
                    self.send_header("Content-Length", str(1 << 40))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                self.wfile.write(body)
                zeros = bytes(65536)
                for _ in range((1 << 40) // len(zeros)):  # until the client hangs up
                    self.wfile.write(zeros)
                return
            if kind == "manifests" and fault == "big":
                r.read()
                return self.reply(200, b'{"pad":"' + b"x" * (5 << 20) + b'"}', headers)
            if kind == "manifests" and fault == "badjson":
                r.read()
                return self.reply(200, b'{"schemaVersion": 2, "manifests": [', headers)
            if kind == "blobs" and fault in ("cut", "corrupt"):
                length = int(r.getheader("Content-Length"))
                if length < 64 << 10:  # the config: as it is
                    return self.reply(200, r.read(), headers)
                self.send_response(200)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                sent = 0
                while sent < length:
                    chunk = r.read(min(65536, length - sent))
                    if not chunk:
                        break
                    if fault == "corrupt" and sent <= length // 2 < sent + len(chunk):
                        i = length // 2 - sent
                        chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
                    if fault == "cut" and sent + len(chunk) > length // 2:
                        self.wfile.write(chunk[: length // 2 - sent])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
                return
            self.send_response(200)
            for k, v in headers:
                self.send_header(k, v)
            length = r.getheader("Content-Length")
            if length is not None:
                self.send_header("Content-Length", length)
                self.end_headers()
                while True:
                    chunk = r.read(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
            else:
                body = r.read()
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

    server = Server(("127.0.0.1", port), H)
    port = server.server_address[1]  # the redirects name it (port 0: the kernel's)
    serve(server)


def blob_server(port, root, log):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            with open(log, "a") as f:
                f.write(f"{self.path} Authorization: {self.headers.get('Authorization', 'none')}\n")
            digest = self.path.rsplit("/", 1)[-1]
            hexd = digest.split(":", 1)[-1]
            path = os.path.join(root, "docker/registry/v2/blobs/sha256", hexd[:2], hexd, "data")
            if not os.path.exists(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = os.path.getsize(path)
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            with open(path, "rb") as f:
                while True:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)

    serve(Server(("127.0.0.1", port), H))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "token":
        token_server(int(args[0]), *args[1:])
    elif cmd == "proxy":
        proxy_server(int(args[0]), args[1], args[2])
    elif cmd == "blobs":
        blob_server(int(args[0]), args[1], args[2])
    else:
        sys.exit("usage: registry_servers.py token|proxy|blobs ...")
