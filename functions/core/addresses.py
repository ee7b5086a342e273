"""Which hosts a function may be steered at by an event (pure: nothing is resolved here).

An event names hosts (an OCI registry in `oci://host/repo`); a function must not be made to
reach this machine, the cloud metadata service or a private network. Every IPv4 notation
is read as the C library reads it when connecting (`127.1`, `2130706433`, `0x7f.1`,
`0177.0.0.1`), an IPv4-mapped IPv6 address as its IPv4 address, a trailing dot is dropped.
What is refused: any address that is not globally routable (loopback, private, link-local,
shared, multicast, reserved, unspecified), and the names of local and metadata hosts;
other names are judged by the addresses they resolve to. `store.allowed_hosts` lists
hosts allowed all the same (an in-cluster registry).
`modelhooks.adapters.net` applies the same rule to the addresses a name resolves to, at
connection time, and connects to the address it checked.

>>> refusal("127.1"), refusal("[::ffff:169.254.169.254]"), refusal("example.com")
('loopback or non-public address 127.0.0.1', 'loopback or non-public address 169.254.169.254', None)
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["ALLOW_HINT", "IPAddress", "literal_ip", "refusal", "refused_address"]

# what a person who runs a registry or store on such a host is told (the refusal's `hint`)
ALLOW_HINT = (
    "a trusted host of yours? list it in store.allowed_hosts (--store-allowed-hosts, "
    "MODELHOOKS_STORE_ALLOWED_HOSTS; host or host:port)"
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_LOCAL_NAMES = {"localhost", "metadata", "metadata.google.internal", "instance-data"}
_LOCAL_SUFFIXES = (".localhost", ".internal")


def literal_ip(host: str) -> IPAddress | None:
    """The address `host` is written as, in any notation, or None for a name."""
    host = host.strip("[]").rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if not host or not all(c in "0123456789abcdefxABCDEFX." for c in host):
            return None
        try:  # the shorthand, decimal, octal and hex forms inet_aton (and connect) accept
            ip = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def refused_address(ip: IPAddress) -> str | None:
    """Why this address may not be reached, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if not ip.is_global or ip.is_multicast:
        return f"loopback or non-public address {ip}"
    return None


def refusal(host: str) -> str | None:
    """Why a host named by an event may not be reached (judged as written), or None."""
    ip = literal_ip(host)
    if ip is not None:
        return refused_address(ip)
    name = host.lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith(_LOCAL_SUFFIXES):
        return f"local or metadata host name {name!r}"
    return None  # other names are judged by what they resolve to, when connecting
