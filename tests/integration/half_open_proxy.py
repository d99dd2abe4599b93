#!/usr/bin/env python3
"""half_open_proxy.py: a TCP relay that loses its clients' FINs (redial.sh).

Usage: half_open_proxy.py UPSTREAM_PORT PORT_FILE

Listens on 127.0.0.1 (an ephemeral port, written to PORT_FILE once
listening) and relays each connection to 127.0.0.1:UPSTREAM_PORT, both ways.
A connection whose upstream side ends (the coordinator died: EOF or a reset)
is not closed towards the client: the relay stops reading and writing it and
keeps the socket open, as a host that vanished mid-connection, or a
partition, leaves its peer's TCP established with nothing coming back. The
client learns nothing: no FIN, no reset. A connection the client closes is
closed upstream. A new connection whose upstream refuses is closed at once.
Each event is a line on stdout ("held N" counts the half-open connections).
"""
import os
import socket
import sys
import threading

held = []  # the client sides kept open after their upstream ended
lock = threading.Lock()


def say(line):
    with lock:
        print(line, flush=True)


def pump(src, dst, on_src_end):
    """Copies src to dst; on_src_end() when src ends. A failed send to dst
    just stops the copy (dst's own pump reports its end)."""
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            on_src_end()
            return
        try:
            dst.sendall(data)
        except OSError:
            return


def relay(client, n, upstream_port):
    try:
        up = socket.create_connection(("127.0.0.1", upstream_port))
    except OSError as e:
        say("conn %d: upstream refused (%s): closed" % (n, e))
        client.close()
        return
    say("conn %d: relayed" % n)
    client_gone = threading.Event()

    def upstream_ended():
        if client_gone.is_set():
            return  # the client closed first: client_ended closed upstream
        with lock:
            held.append(client)  # never closed, never read again
            count = len(held)
        say("conn %d: upstream ended; client side held open (held %d)" % (n, count))

    def client_ended():
        client_gone.set()
        try:
            up.shutdown(socket.SHUT_RDWR)  # wakes the upstream pump's recv
            up.close()
        except OSError:
            pass

    threading.Thread(target=pump, args=(up, client, upstream_ended), daemon=True).start()
    threading.Thread(target=pump, args=(client, up, client_ended), daemon=True).start()


def main():
    upstream_port, port_file = int(sys.argv[1]), sys.argv[2]
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(port_file + ".tmp", port_file)
    n = 0
    while True:
        client, _ = ls.accept()
        n += 1
        relay(client, n, upstream_port)


if __name__ == "__main__":
    main()
