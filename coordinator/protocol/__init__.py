"""The wire protocol, written once: what the server encodes and every client decodes.

- `constants`: the wire's limits and defaults (protocol version, ranges, lengths, read bounds).
- `names`: lane / route / account / machine name rules and the lane -> file-name mapping.
- `errors`: the error codes, their HTTP statuses and the `LaneError` hierarchy.
- `requests`: one Struct per POST body.
- `queries`: one Struct per GET read's query parameters, and `decode_query`.
- `replies`: one Struct per reply and per nested object (Ticket, Pause, LaneReply, ...).
- `receipts`: receipt ids and content hashes (RFC 8785 canonical JSON, sha256).

Import rule: this package imports nothing but the standard library, msgspec and rfc8785 (the
canonical JSON of receipts) — never the server (config, core, store, actor, service, http) nor
the client. tests/unit/test_import_direction.py checks it in a fresh interpreter.
"""
