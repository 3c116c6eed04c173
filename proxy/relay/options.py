"""What the relay records and how it treats secrets (``triton-tap record``'s relay options)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.triton.metadata import DEFAULT_REDACT, REDACT_SUFFIXES

REDACTED = "<redacted>"


@dataclass(frozen=True)
class RelayOptions:
    """What the relay records and how it treats secrets."""

    payload: str = "meta"  # none | meta | full
    payload_cap: int | None = None
    #: ``full`` payloads: ``side`` (messages of 1 KiB or more raw in the capture file's side file,
    #: ``payload_at``; smaller ones base64 in the line) or ``inline`` (all base64).
    payload_store: str = "side"
    redact: tuple[str, ...] = DEFAULT_REDACT
    #: ``--redact-input``: input tensors whose data never reaches the capture (``full`` mode).
    redact_inputs: frozenset[str] = frozenset()
    #: HMAC key for redacted tensors' hashes (the capture's redaction salt).
    redact_key: bytes = b""

    def redacts(self, name: str) -> bool:
        """Whether a metadata key's value must not reach the capture in clear."""
        return name in self.redact or name.endswith(REDACT_SUFFIXES)
