"""The built-in rendezvous backend: the server (admission, member I/O, keep-alive loss), the handshake, the framed wire
and the agent's link."""
