"""The rendezvous' typed protocol, both directions and both backends: every message checks its own shape on arrival."""
