"""This host's network as a job sees it: its interfaces, the route to a peer, and what a name resolves to.

From the socket API and two ioctls (no ``ip`` command, no extra package), so it answers the same in a
container, a namespace or on bare metal. Used where a multi-host job must pick or check the socket
interface that Gloo and NCCL bind to (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass

_SIOCGIFADDR = 0x8915
_SIOCGIFMTU = 0x8921


@dataclass(frozen=True)
class Interface:
    name: str
    addr: str | None  # its IPv4 address, None when it has none
    mtu: int | None


def interfaces() -> dict[str, Interface]:
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            packed = struct.pack("256s", name.encode()[:15])
            addr = mtu = None
            with contextlib.suppress(OSError):
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), _SIOCGIFADDR, packed)[20:24])
            with contextlib.suppress(OSError):
                mtu = struct.unpack("i", fcntl.ioctl(s.fileno(), _SIOCGIFMTU, packed)[16:20])[0]
            out[name] = Interface(name, addr, mtu)
    return out


def resolve(name: str) -> str | None:
    """NAME's IPv4 address as this host resolves it (its /etc/hosts, then DNS), or None."""
    try:
        return socket.gethostbyname(name)
    except (OSError, UnicodeError):
        return None


def is_loopback(addr: str | None) -> bool:
    try:
        return addr is not None and ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Route:
    dest: str  # the address the name resolved to
    src: str  # this host's address on the way there
    iface: str | None  # the interface that holds SRC


def route_to(host: str) -> Route | None:
    """The interface and source address this host uses to reach HOST (the kernel's choice: a UDP
    ``connect`` sends nothing), or None when HOST does not resolve or no route leads there."""
    dest = host if is_address(host) else resolve(host)
    if dest is None:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((dest, 9))
            src = s.getsockname()[0]
    except OSError:
        return None
    iface = next((i.name for i in interfaces().values() if i.addr == src), None)
    return Route(dest, src, iface)


def own_addresses() -> set[str]:
    return {i.addr for i in interfaces().values() if i.addr}


def hostname() -> str:
    return socket.gethostname()
