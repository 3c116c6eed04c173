"""Which request/response metadata values a capture never holds: one rule for the relay and the CLI's help."""

from __future__ import annotations

#: Keys whose values are always recorded as ``<redacted>`` (upstream still gets them unchanged).
DEFAULT_REDACT = ("authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key")
#: Any key ending with one of these is a credential too (``x-auth-token``, ``client-secret``).
REDACT_SUFFIXES = ("-token", "-secret")
