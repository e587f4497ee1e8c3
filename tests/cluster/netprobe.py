"""Small network probes run on emulated hosts: a TCP sink, a TCP client that reports what happened, UDP counts.

    netprobe.py serve PORT                 accept connections and read them to the end (prints "listening")
    netprobe.py connect HOST PORT [BYTES]  one line: ok MBIT_PER_S | refused | timeout | unreachable
    netprobe.py udp-recv PORT SECONDS      how many datagrams arrived within SECONDS of the first
    netprobe.py udp-send HOST PORT N SIZE  N datagrams of SIZE bytes, don't-fragment set
"""

import socket
import sys
import time


def serve(port: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        while c.recv(1 << 20):
            pass
        c.sendall(b"k")
        c.close()


def connect(host: str, port: int, nbytes: int) -> str:
    try:
        s = socket.create_connection((host, port), timeout=3)
    except ConnectionRefusedError:
        return "refused"
    except (socket.timeout, TimeoutError):
        return "timeout"
    except OSError as e:
        return f"unreachable {e.errno}"
    t = time.monotonic()
    s.settimeout(60)
    s.sendall(b"x" * nbytes)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    return f"ok {nbytes * 8 / 1e6 / (time.monotonic() - t):.1f}"


def udp_recv(port: int, seconds: float) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    print("listening", flush=True)
    s.settimeout(30)
    n = 0
    try:
        s.recv(65535)
        n, end = 1, time.monotonic() + seconds
        while time.monotonic() < end:
            s.settimeout(max(0.01, end - time.monotonic()))
            s.recv(65535)
            n += 1
    except (socket.timeout, TimeoutError):
        pass
    return n


def udp_send(host: str, port: int, n: int, size: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: never fragment
    for _ in range(n):
        try:
            s.sendto(b"x" * size, (host, port))
        except OSError as e:
            print(f"send failed {e.errno}", flush=True)
            return
        time.sleep(0.0005)
    print("sent", flush=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        serve(int(args[0]))
    elif cmd == "connect":
        print(connect(args[0], int(args[1]), int(args[2]) if len(args) > 2 else 0))
    elif cmd == "udp-recv":
        print(udp_recv(int(args[0]), float(args[1])))
    elif cmd == "udp-send":
        udp_send(args[0], int(args[1]), int(args[2]), int(args[3]))
