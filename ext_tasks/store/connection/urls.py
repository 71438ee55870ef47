"""What a ``--valkey-url`` names: ``valkey://HOST:PORT/DB`` (one Valkey), ``valkey+cluster://HOST:PORT[,...]``
(a cluster's seed nodes) or ``valkey+sentinel://HOST:PORT[,...]/NAME[/DB]`` (the primary a group of
sentinels names). Parsing only: :func:`~.topology.connect` opens what the URL names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit

CLUSTER_SCHEME: Final = "valkey+cluster"
SENTINEL_SCHEME: Final = "valkey+sentinel"


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    sentinels: list[Endpoint]
    name: str
    db: int
    credentials: dict[str, str]


def scheme_of(url: str) -> str:
    """The URL's scheme (``valkey``, ``valkey+cluster``, ``valkey+sentinel``, or whatever else it says)."""
    return urlsplit(url).scheme


def cluster_seeds(url: str) -> tuple[list[Endpoint], dict[str, str]]:
    """The seed nodes of ``valkey+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]``, and the
    credentials (``username``/``password``) if the URL has them."""
    parts = urlsplit(url)
    if parts.scheme != CLUSTER_SCHEME:
        raise ValueError(f"not a {CLUSTER_SCHEME}:// URL")
    return parse_hosts(parts.netloc, what="cluster seed")


def sentinel_target(url: str) -> SentinelTarget:
    """What ``valkey+sentinel://HOST:PORT[,...]/NAME[/DB]`` names; ``ValueError`` says what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise ValueError(f"not a {SENTINEL_SCHEME}:// URL")
    sentinels, credentials = parse_hosts(parts.netloc, what="sentinel")
    path = [unquote(segment) for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2:
        raise ValueError(f"{SENTINEL_SCHEME}:// needs the monitored primary's name: HOST:PORT[,...]/NAME[/DB]")
    name = path[0]
    if len(path) == 2 and not path[1].isdigit():
        raise ValueError(f"database {path[1]!r} is not a number")
    return SentinelTarget(sentinels, name, int(path[1]) if len(path) == 2 else 0, credentials)


def parse_hosts(netloc: str, *, what: str) -> tuple[list[Endpoint], dict[str, str]]:
    """``[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]``: the endpoints, and the credentials if any."""
    credentials: dict[str, str] = {}
    hosts = netloc
    if "@" in hosts:
        userinfo, hosts = hosts.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        if user:
            credentials["username"] = unquote(user)
        if password:
            credentials["password"] = unquote(password)
    endpoints = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{what} {item!r} is not HOST:PORT")
        endpoints.append(Endpoint(host.strip("[]"), int(port)))
    return endpoints, credentials
