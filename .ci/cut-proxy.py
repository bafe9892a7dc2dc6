"""A TCP proxy for .ci/run that stands for a store going away in the middle of an upload:
it forwards connections to the upstream S3 server and cuts any request whose first line
names a `.age` object once 1 MiB of it has passed. Usage: cut-proxy.py LISTEN_PORT UPSTREAM_PORT"""
import socket
import sys
import threading

LISTEN, UPSTREAM = int(sys.argv[1]), int(sys.argv[2])
CUT_AFTER = 1 << 20


def pipe(src, dst, watch):
    seen = 0
    first = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if watch:
                if len(first) < 512:
                    first += data[: 512 - len(first)]
                seen += len(data)
                if b".age" in first.split(b"\r\n", 1)[0] and seen > CUT_AFTER:
                    break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", LISTEN))
server.listen(16)
while True:
    client, _ = server.accept()
    upstream = socket.create_connection(("127.0.0.1", UPSTREAM))
    threading.Thread(target=pipe, args=(client, upstream, True), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client, False), daemon=True).start()
