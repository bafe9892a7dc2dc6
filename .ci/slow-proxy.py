"""A TCP proxy for .ci/run that stands for a hostile or broken S3 endpoint on 127.0.0.1.
Usage: slow-proxy.py MODE LISTEN_PORT UPSTREAM_PORT
  stall    accept every connection, read the request, never answer
  trickle  forward; the body of the answer to a GET of a `.age` object comes 1 byte a second
  midbody  forward; the answer to a GET of a `.age` object stops after 64 KiB (kept open)
Every accepted connection is logged on stdout ("accepted"), so a test can tell that no
request was sent. It stops by itself after 15 minutes."""
import socket
import sys
import threading
import time

MODE, LISTEN, UPSTREAM = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
DEADLINE = time.time() + 900


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def stall(client):
    try:
        while time.time() < DEADLINE and client.recv(65536):
            pass
    except OSError:
        pass
    close(client)


def forward(client):
    upstream = socket.create_connection(("127.0.0.1", UPSTREAM))
    state = {"slow": False}

    def up():
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                line = data.split(b"\r\n", 1)[0]
                # A new request on a kept-alive connection decides for its own answer.
                if line.startswith((b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ")):
                    state["slow"] = line.startswith(b"GET ") and b".age" in line
                upstream.sendall(data)
        except OSError:
            pass
        close(client, upstream)

    def down():
        sent = 0
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if state["slow"] and MODE == "trickle":
                    # The status line and headers at once, then the body 1 byte a second.
                    if sent == 0 and b"\r\n\r\n" in data:
                        cut = data.index(b"\r\n\r\n") + 4
                        client.sendall(data[:cut])
                        data, sent = data[cut:], cut
                    for i in range(len(data)):
                        if time.time() > DEADLINE:
                            raise OSError("deadline")
                        client.sendall(data[i : i + 1])
                        time.sleep(1)
                    continue
                if state["slow"] and MODE == "midbody":
                    room = max(0, 65536 - sent)
                    client.sendall(data[:room])
                    sent += min(room, len(data))
                    if sent >= 65536:
                        while time.time() < DEADLINE:
                            time.sleep(1)
                        break
                    continue
                client.sendall(data)
        except OSError:
            pass
        close(client, upstream)

    threading.Thread(target=up, daemon=True).start()
    threading.Thread(target=down, daemon=True).start()


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", LISTEN))
server.listen(64)
server.settimeout(1)
while time.time() < DEADLINE:
    try:
        client, _ = server.accept()
    except socket.timeout:
        continue
    print("accepted", flush=True)
    if MODE == "stall":
        threading.Thread(target=stall, args=(client,), daemon=True).start()
    else:
        forward(client)
