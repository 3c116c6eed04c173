"""The verified client certificate of a connection, as the capture names it (``call_start.client_subject``)."""

from __future__ import annotations

import asyncio

#: RFC 4514 short names of the attributes ``ssl.getpeercert()`` spells out.
_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def format_subject(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """``getpeercert()['subject']`` as an RFC 4514 string (most specific RDN first, e.g. ``CN=x,O=y``)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def client_subject(transport: asyncio.BaseTransport) -> str | None:
    """The subject of the client certificate verified at the handshake, or None (no TLS, no client certificate)."""
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None  # an unverified certificate is not reported at all (getpeercert gives {})
    subject = cert.get("subject")
    return format_subject(subject) if subject else ""
