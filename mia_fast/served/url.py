"""A served model's address, read and shown in one place: one parser that answers every malformed URL in one line
(scheme, IPv6 brackets, port, a user or query that would carry a key), and URLs as a line or a file may show them:
valid URLs, with the user part and every query value masked and the API key hidden wherever it sits."""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote

from mia_fast.errors import MiaFastError, shown

MASK = "***"
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
# host[:port] after any user part: a bracketed IPv6 address or a registered name (an IPv4 address is one).
_HOST_PORT = re.compile(r"(?:\[(?P<ip6>[^\]]*)\]|(?P<name>[A-Za-z0-9._~-]+))(?::(?P<port>[0-9]*))?\Z")
# A URL inside a line: a scheme, then everything up to a space or a quote. A scheme starts no mid-word, so that
# a long word is read once, not from each of its letters.
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_USER_PART = re.compile(r"[^/?#@\s]*@")
# An environment variable's name; a longer one with digits and small letters reads as a key, not a name.
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEY_LIKE_LENGTH = 20
# An IPv6 zone (RFC 6874): an interface's name or number, after its percent-encoding is undone.
_ZONE = re.compile(r"[A-Za-z0-9._~-]+\Z")


@dataclass(frozen=True)
class _Pieces:
    """A URL cut at its delimiters, nothing checked: ``user`` and ``query`` are None where the URL has none."""

    scheme: str | None
    user: str | None
    host_port: str
    path: str
    query: str | None
    fragment: str | None

    def text(self) -> str:
        user = "" if self.user is None else f"{self.user}@"
        query = "" if self.query is None else f"?{self.query}"
        fragment = "" if self.fragment is None else f"#{self.fragment}"
        scheme = "" if self.scheme is None else f"{self.scheme}://"
        return f"{scheme}{user}{self.host_port}{self.path}{query}{fragment}"


def _pieces(url: str) -> _Pieces:
    """``url`` cut at its delimiters; without ``scheme://`` it is read as starting at its host (``host:port/...``)."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = None, url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, rest = rest[:end], rest[end:]
    rest, hash_mark, fragment = rest.partition("#")
    path, question_mark, query = rest.partition("?")
    user, at, host_port = authority.rpartition("@")
    return _Pieces(
        scheme, user if at else None, host_port, path, query if question_mark else None, fragment if hash_mark else None
    )


def masked_url(url: str) -> str:
    """``url`` with its user part and every query value (and any fragment) written as ***: a URL still, and one
    that shows where a key was."""
    pieces = _pieces(url)
    query = pieces.query
    if query is not None:
        query = "&".join(
            f"{name}={MASK}" if equals else MASK
            for name, equals, _ in (part.partition("=") for part in query.split("&"))
        )
    masked = _Pieces(
        pieces.scheme,
        None if pieces.user is None else MASK,
        pieces.host_port,
        pieces.path,
        query,
        None if pieces.fragment is None else MASK,
    ).text()
    # A user part where a malformed URL has it (after a broken scheme, in what reads as its path).
    return _USER_PART.sub(f"{MASK}@", masked)


def mask_urls(text: str) -> str:
    """``text`` with every URL in it masked as ``masked_url`` does."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: masked_url(match[0]), text)


def hide_key(text: str, key: str | None) -> str:
    """``text`` with ``key`` replaced by ***, as it is and as a URL may spell any of its characters
    (percent-encoded)."""
    return _key_pattern(key).sub(MASK, text) if key else text


@functools.lru_cache(maxsize=8)
def _key_pattern(key: str) -> re.Pattern[str]:
    def spellings(char: str) -> str:
        encoded = "".join(
            "%" + "".join(f"[{h}{h.upper()}]" if h.isalpha() else h for h in f"{b:02x}") for b in char.encode()
        )
        return f"(?:{re.escape(char)}|{encoded})"

    return re.compile("".join(map(spellings, key)))


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base: str  # the path before /v1/..., without a trailing slash

    @property
    def loopback(self) -> bool:
        if self.host.lower() in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host.partition("%")[0]).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        address, percent, zone = self.host.partition("%")
        host = f"[{address}{percent and '%25'}{zone}]" if ":" in address else self.host
        # Reading takes one /v1 off the path: a base that itself ends in /v1 is written with that one.
        api = "/v1" if self.base.endswith("/v1") else ""
        return f"{self.scheme}://{host}:{self.port}{self.base}{api}"


def endpoint(url: str) -> Endpoint:
    """The server's address in ``url``; one line for what is not an http(s) URL of a host, and for a URL carrying a
    user, password or query (a key belongs in an environment variable, never on a command line)."""

    def refuse(reason: str) -> MiaFastError:
        return MiaFastError(f"server URL {shown(masked_url(url))}: {reason}")

    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise refuse("a URL is printable ASCII without spaces (percent-encode the rest, a host in its xn-- form)")
    pieces = _pieces(url)
    if pieces.scheme is None:
        raise refuse("no scheme: give it as http:// or https://, e.g. http://127.0.0.1:8000")
    if pieces.scheme.lower() not in ("http", "https"):
        named = f"the scheme is {shown(pieces.scheme)}" if _SCHEME.fullmatch(pieces.scheme) else "no scheme it names"
        raise refuse(f"{named}; a server is reached over http:// or https://")
    if pieces.user is not None:
        raise refuse("must not hold a user or password: put the key in an environment variable (--api-key-env)")
    if pieces.query is not None or pieces.fragment is not None:
        raise refuse("give the server's base URL, without a query or fragment (a key belongs in --api-key-env)")
    if pieces.host_port.startswith("[") and "]" not in pieces.host_port:
        raise refuse("its [IPv6 address] has no closing bracket, e.g. http://[::1]:8000")
    host_port = _HOST_PORT.match(pieces.host_port)
    if host_port is None:
        raise refuse(
            "names no host, or a host that is not a name, an IPv4 address or an [IPv6 address] in both brackets"
        )
    host = host_port["name"] or _ipv6(host_port["ip6"], refuse)
    port = host_port["port"]
    if port and (len(port) > 5 or not 1 <= int(port) <= 65535):  # (an int of thousands of digits is refused)
        raise refuse(f"the port is {shown(port)}; a port is a number from 1 to 65535")
    scheme = pieces.scheme.lower()
    base = pieces.path.rstrip("/").removesuffix("/v1").rstrip("/")
    return Endpoint(scheme, host, int(port) if port else (443 if scheme == "https" else 80), base)


def _ipv6(text: str, refuse) -> str:
    """The address in brackets, with its zone where it has one: ``%25`` (RFC 6874) or a bare ``%`` parts them, and
    only the zone is percent-decoded (an address has no escapes: ``%41`` must not read as an ``A`` of it)."""
    address, percent, zone = text.partition("%")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise refuse(f"{shown(text)} in brackets is not an IPv6 address") from None
    if not percent:
        return address
    zone = zone.removeprefix("25")
    decoded = unquote(zone)
    if _ZONE.match(decoded) is None:
        raise refuse(f"the zone {shown(zone)} of [{address}] is no interface's name or number, e.g. [fe80::1%25eth0]")
    return f"{address}%{decoded}"


def environment_key(variable: str | None) -> str | None:
    """The key in the environment variable ``variable``, without surrounding blanks (a key pasted with its line's
    end: no part of a key, and no header may hold them); None where there is none."""
    if not variable:
        return None
    return os.environ.get(variable, "").strip() or None


def key_variable(name: str) -> str:
    """``name`` where it is an environment variable's name, else one line that does not show it: a value that is
    no variable's name may be the key itself."""
    looks_like_key = len(name) >= _KEY_LIKE_LENGTH and any(c.isdigit() for c in name) and any(c.islower() for c in name)
    if _VARIABLE_NAME.match(name) is None or looks_like_key:
        raise MiaFastError(
            "--api-key-env takes the name of the environment variable that holds the key (e.g. OPENAI_API_KEY), "
            "and what was given is not a variable's name: it is not shown, as it may be the key itself"
        )
    return name
