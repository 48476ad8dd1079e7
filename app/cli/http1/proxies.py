"""The trusted proxies of `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py): whose
`X-Forwarded-Host` is believed, and how it becomes the request's `Host`."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from app.api.middleware import names_this_machine
from app.cli.refusals import Header

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def as_compared(network: Network) -> Network:
    """`::ffff:10.0.0.1` as `10.0.0.1`: an IPv4 peer of a service bound to `::` is compared as
    IPv4, so an IPv4-mapped entry never matched."""
    if isinstance(network, ipaddress.IPv4Network) or network.prefixlen < 96:
        return network
    mapped = network.network_address.ipv4_mapped
    return network if mapped is None else ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")


def trusted_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """AGMEM_TRUSTED_PROXIES' addresses or networks (`10.0.0.0/8`), as peers are compared."""
    return tuple(as_compared(ipaddress.ip_network(entry, strict=False)) for entry in entries)


def trusts(networks: tuple[Network, ...], peer: str) -> tuple[bool, bool]:
    """Whether the peer at this address is a trusted proxy, and whether it is loopback."""
    address = ipaddress.ip_address(peer)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # an IPv4 client of a service bound to `::`
    return any(address in network for network in networks), address.is_loopback


def take_forwarded_host(
    headers: list[Header], *, loopback: bool, allowed_hosts: frozenset[str]
) -> None:
    """The first name of the proxy's `X-Forwarded-Host` as `Host` (the one the client
    asked for, where proxies in a chain append theirs): the proxy must set the header, not
    append to the client's. From a loopback peer, only when the real `Host` passes the Host
    rule: else a rebound page would name this machine there."""
    forwarded = next((v for k, v in headers if k == b"x-forwarded-host"), None)
    name = (forwarded or b"").split(b",", 1)[0].strip()
    if not name:
        return
    if loopback:
        host = next((v for k, v in headers if k == b"host"), None)
        if host is None or not names_this_machine(host, allowed_hosts):
            return
    headers[:] = [(k, v) for k, v in headers if k != b"host"]
    headers.append((b"host", name))
