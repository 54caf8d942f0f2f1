"""Admission to the rendezvous: accepting connections and every connection's handshake and join, on one thread.

Why one thread with a selector and not one thread per connection: a thread start costs about 0.1 ms and each leg of
a handshake served by its own thread is one more wake-up; on the join's path that was most of what authentication
added to a join. Here the accept, the Noise handshake (``auth.py``), the agent's proof and its join are read and
answered by the one ``rdzv-accept`` thread as the bytes arrive, never waiting on any one peer (non-blocking sockets,
reads of at most what the current step needs); the server then welcomes the member and only after that starts the
member's own thread (``server.py``).

Fair at scale (issue 33: a thousand machines arrive in the same second, and strangers are about). An unauthenticated
connection is in one of two stages:

- *fresh*: accepted, its hello not complete. These are the only connections that ever give way to a newcomer:
  at most :data:`FRESH_PER_SOURCE` per source address (the oldest of that address gives way) and :attr:`room` in
  all (the oldest gives way). A real agent sends its hello with its connect, so it is fresh for a round trip at
  most; idle connections, even from a machine's own address (another user, a NAT), only evict each other.
- *challenged*: it sent a well-formed hello and was answered; its proof is due. Never evicted: when :attr:`room`
  are challenged, a newcomer's hello is answered :data:`auth.BUSY` and closed, and the agent tries again (it backs
  off, ``retry.py``). Per source address there is no cap, so that a fleet behind one NAT address gets in at
  once, except for a *suspect* address: one whose connection failed the handshake (a wrong hello, a wrong proof,
  no proof in time) in the last :data:`SUSPECT_S` seconds; it holds at most :data:`PENDING_PER_SOURCE`.

:attr:`room` scales with the job (``nodes``: ``--nnodes`` max; :func:`handshake_room`), and the listen backlog
with it. Each connection must finish the handshake within ``auth.HANDSHAKE_S`` seconds of its accept, and one that
proved the secret gets ``auth.HANDSHAKE_S`` more for its join, holding no slot. A stranger holds at most
:data:`auth.HELLO` bytes (then :data:`auth.HEADER`: the encrypted length of its join, which is its proof of the
secret); one that fails anything is closed without a word. The accept survives running out of
file descriptors (a line, a pause, and on).
"""
from __future__ import annotations

import collections
import errno
import selectors
import socket
import threading
import time
from typing import Callable

from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.tcp.admission_rules import (  # noqa: F401 - the caps, read by server.py and tests
    ACCEPT_BACKOFF_S, ACCEPTS_PER_WAKE, DEFAULT_NODES, FRESH_PER_SOURCE, PENDING_PER_SOURCE, PENDING_TOTAL,
    Suspects, descriptor_limit, handshake_room, listen_backlog)

_HELLO, _PROOF, _JOIN = 0, 1, 2  # what a connection's next bytes are: Noise message 1, the join's header, its body
_WAKE = "wake"  # the selector's mark for the wake-up pair


class _Handshake:
    """One connection's handshake under way: what it has sent so far and what comes next."""

    __slots__ = ("sock", "source", "deadline", "step", "need", "buffer", "length", "session")

    def __init__(self, sock: socket.socket, source: str, deadline: float) -> None:
        self.sock, self.source, self.deadline = sock, source, deadline
        self.step, self.need, self.buffer = _HELLO, auth.HELLO, bytearray()
        self.length = 0  # the join's, once its encrypted length (the agent's proof) decrypted
        self.session: auth.Session | None = None


class _Busy(Exception):
    """No room to challenge this hello now."""


class _Parked:
    """A welcomed member whose own thread has not started yet: it starts when the member first speaks."""

    __slots__ = ("sock", "fd", "closed", "wake")

    def __init__(self, sock: socket.socket, closed: Callable[[], bool], wake: Callable[[bool], None]) -> None:
        self.sock, self.closed, self.wake = sock, closed, wake
        self.fd = sock.fileno()  # its descriptor as registered (after another thread closed it, fileno() is -1)


class Admission:
    """The accept loop. ``admitted(sock, session, payload)``: a connection that proved the secret, with its first
    frame's payload (its join, not yet decoded); called on this thread, and it must not wait on the peer.

    ``pending`` (unauthenticated connections per source address), ``waiting`` (the same connections, oldest
    first) and ``suspects`` (source address -> when it last failed a handshake) are this thread's; others may read
    them (the tests do). ``nodes``: the job's ``--nnodes`` max, which sizes :attr:`room` and the listen backlog.
    """

    def __init__(self, accept: Callable[[], tuple[socket.socket, tuple]], listener: socket.socket, secret: bytes,
                 *, admitted: Callable[[socket.socket, auth.Session, bytes], None], say: Callable[[str], None],
                 closing: threading.Event, nodes: int = DEFAULT_NODES) -> None:
        self._accept_one = accept  # through the server, which owns the listener
        self._listener = listener
        self._secret = secret
        self._admitted = admitted
        self._say = say
        self._closing = closing
        self.room = handshake_room(nodes, descriptor_limit())
        self.backlog = listen_backlog(nodes)
        self.pending: dict[str, int] = {}
        self.waiting: dict[socket.socket, _Handshake] = {}
        self._fresh: dict[socket.socket, _Handshake] = {}  # their hello is not complete: these may give way
        self._fresh_from: dict[str, dict[socket.socket, _Handshake]] = {}  # the same, per source, oldest first
        self._challenged_from: dict[str, int] = {}
        self.suspects = Suspects()
        self._proved: dict[socket.socket, _Handshake] = {}  # proved the secret, their join not complete yet
        self._parked: dict[socket.socket, _Parked] = {}
        self._parked_fds: dict[int, _Parked] = {}  # the same, by descriptor: a new socket may reuse a closed one's
        self._selector = selectors.DefaultSelector()
        # Members to watch that joined on another thread (RendezvousServer.join_here), and a socket pair whose
        # byte wakes this thread for them.
        self._to_park: collections.deque[tuple[socket.socket, Callable[[], bool], Callable[[bool], None]]] = \
            collections.deque()
        self._wake_here, self._wake_there = socket.socketpair()
        self._wake_there.setblocking(False)

    def run(self) -> None:
        try:  # listen again: on Linux this sets the backlog of the listening socket (a burst waits in the kernel)
            self._listener.listen(self.backlog)
        except OSError:
            pass
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_here.setblocking(False)
        self._selector.register(self._wake_here, selectors.EVENT_READ, _WAKE)
        try:
            while not self._closing.is_set():
                try:
                    self._turn()
                except Exception as bad:  # noqa: BLE001 - the listener outlives any one connection
                    self._say(f"rendezvous accept loop: {bad!r} (going on)")
                    time.sleep(ACCEPT_BACKOFF_S)
        finally:
            for shake in [*self.waiting.values(), *self._proved.values()]:
                shake.sock.close()
            self.waiting.clear()
            self._fresh.clear()
            self._fresh_from.clear()
            self._challenged_from.clear()
            self._proved.clear()
            self._parked.clear()  # members: their connections are the server's to close
            self._parked_fds.clear()
            self.pending.clear()
            self.suspects.clear()
            self._selector.close()
            self._wake_here.close()
            self._wake_there.close()

    def park(self, sock: socket.socket, closed: Callable[[], bool], wake: Callable[[bool], None]) -> None:
        """Watch a welcomed member's connection (on this thread, from ``admitted``) until the member first speaks,
        closes it, or ``closed()`` (another thread closed it), then call ``wake(gone)`` here (``gone``: closed,
        nothing to read): the member's own thread starts then, off the welcome's path (an agent's first message,
        its ``ready``, follows the welcome at once), and not at all for a member that left without a word."""
        self._reclaim(sock)
        parked = _Parked(sock, closed, wake)
        try:
            self._selector.register(sock, selectors.EVENT_READ, parked)
        except (OSError, ValueError, KeyError):
            wake(False)
            return
        self._parked[sock] = parked
        self._parked_fds[parked.fd] = parked

    def park_soon(self, sock: socket.socket, closed: Callable[[], bool], wake: Callable[[bool], None]) -> None:
        """:meth:`park`, from any thread: handed to this one (a deque and one byte), so the caller starts no thread
        and waits for none."""
        self._to_park.append((sock, closed, wake))
        try:
            self._wake_there.send(b"\0")
        except OSError:
            pass  # a byte is already waiting (the pair is full), or the loop has ended

    def _park_handed(self) -> None:
        try:
            while self._wake_here.recv(4096):
                pass
        except OSError:
            pass
        while self._to_park:
            self.park(*self._to_park.popleft())

    def _wake(self, parked: _Parked, readable: bool) -> None:
        if self._parked.pop(parked.sock, None) is None:
            return  # already woken (by a sweep earlier in this turn)
        if self._parked_fds.get(parked.fd) is parked:
            del self._parked_fds[parked.fd]
        try:  # by the socket object: this works after another thread closed it too
            self._selector.unregister(parked.sock)
        except (KeyError, ValueError):
            pass
        gone = not readable  # closed by another thread
        if readable:
            try:  # readable: a byte or the end is there, so this never waits
                gone = parked.sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
        parked.wake(gone)

    def _sweep(self) -> None:
        """Wake the parked members that another thread closed (once a turn: their ends are reported)."""
        for parked in [p for p in self._parked.values() if p.closed()]:
            self._wake(parked, readable=False)

    def _reclaim(self, sock: socket.socket) -> None:
        """Before ``sock`` is registered: wake the parked member whose descriptor it reuses (another thread closed
        that one's socket). One look-up, not a sweep: a sweep per accepted connection went over every parked member
        each time, quadratic in a burst."""
        stale = self._parked_fds.get(sock.fileno())
        if stale is not None and stale.sock is not sock:
            self._wake(stale, readable=False)

    def _turn(self) -> None:
        self._sweep()
        now = time.monotonic()
        first = min((s.deadline for s in (*self.waiting.values(), *self._proved.values())), default=now + 0.25)
        for key, _ in self._selector.select(min(0.25, max(0.0, first - now))):
            if key.data is None:
                if not self._accept():
                    return
            elif key.data is _WAKE:
                self._park_handed()
            elif isinstance(key.data, _Parked):
                self._wake(key.data, readable=True)
            else:
                self._step(key.data)
        now = time.monotonic()
        for shake in [s for s in (*self.waiting.values(), *self._proved.values()) if s.deadline <= now]:
            self._drop(shake, failed=shake.step == _PROOF)  # too slow: closed without a word

    def _accept(self) -> bool:
        """Accept what is waiting; False when the listener is gone."""
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, peer = self._accept_one()
            except BlockingIOError:
                return True
            except OSError as bad:
                if self._closing.is_set() or self._listener.fileno() < 0:
                    return False
                if bad.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._say(f"cannot accept a connection ({bad.strerror}); trying again")
                time.sleep(ACCEPT_BACKOFF_S)  # never busy-loop on a persistent error
                return True
            self._admit(sock, str(peer[0]))
        return True

    def _admit(self, sock: socket.socket, source: str) -> None:
        mine = self._fresh_from.get(source)
        if mine is not None and len(mine) >= FRESH_PER_SOURCE:  # that address's oldest fresh connection gives way
            self._drop(next(iter(mine.values())))
        if len(self._fresh) >= self.room:  # the oldest fresh connection gives way; a challenged one never does
            self._drop(next(iter(self._fresh.values())))
        shake = _Handshake(sock, source, time.monotonic() + auth.HANDSHAKE_S)
        self._reclaim(sock)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ, shake)
        except (OSError, ValueError):
            sock.close()
            return
        self.waiting[sock] = shake
        self._fresh[sock] = shake
        self._fresh_from.setdefault(source, {})[sock] = shake
        self.pending[source] = self.pending.get(source, 0) + 1
        self._step(shake)  # the hello is often here already

    def _room_for_challenge(self, shake: _Handshake) -> bool:
        """Whether a well-formed hello may be answered now (False: the server is busy for it)."""
        if len(self.waiting) - len(self._fresh) >= self.room:
            return False
        return not (self._challenged_from.get(shake.source, 0) >= PENDING_PER_SOURCE
                    and self.suspects.holds(shake.source, time.monotonic()))

    def _step(self, shake: _Handshake) -> None:
        """Read what has arrived (never more than the current step needs) and answer it; never waits."""
        try:
            while True:
                chunk = shake.sock.recv(shake.need - len(shake.buffer))
                if not chunk:
                    raise auth.ClosedEarly("closed during the handshake")
                shake.buffer += chunk
                if len(shake.buffer) < shake.need:
                    continue
                if self._advance(shake):
                    return
        except BlockingIOError:
            return
        except _Busy:
            self._busy(shake)
        except auth.ClosedEarly:
            self._drop(shake, failed=shake.step == _PROOF)  # gone: closed without a word
        except (auth.AuthError, ValueError):
            self._drop(shake, failed=True)  # not an agent of this job: closed without a word
        except OSError:
            self._drop(shake)

    def _advance(self, shake: _Handshake) -> bool:
        """The current step's bytes are all there: answer them. True when there is nothing more to read now."""
        data = bytes(shake.buffer)
        if shake.step == _HELLO:
            if not auth.is_hello(data):
                raise auth.AuthError("not a tfdist agent (of this version)")
            if not self._room_for_challenge(shake):
                raise _Busy()  # before the Diffie-Hellman: a busy server spends nothing on a newcomer
            answer, session = auth.answer_hello(self._secret, data)  # AuthError: an unusable key
            try:  # a fresh socket's buffer is empty: it always fits in practice, and this never waits
                sent = shake.sock.send(answer)
            except BlockingIOError:
                sent = 0
            if sent != len(answer):
                raise auth.AuthError("the handshake's answer did not fit the send buffer")
            shake.session = session
            shake.step, shake.need = _PROOF, auth.HEADER  # the join's encrypted length: the agent's proof
            shake.buffer.clear()
            self._challenge(shake)
            auth.make_spares(server=True)  # the next handshake's key, while this agent works out its join
            return True  # the proof comes only after the agent read the answer: no read that must fail now
        assert shake.session is not None
        if shake.step == _PROOF:
            shake.length = shake.session.open_header(data)  # AuthError: not the secret, or a replay
            self._forget(shake)  # it proved the secret: it holds no slot any more, and gets time for its join
            self._proved[shake.sock] = shake
            shake.step, shake.need = _JOIN, auth.body_size(shake.length)
            shake.buffer.clear()
            shake.deadline += auth.HANDSHAKE_S
            if shake.need:
                return False
            data = b""
        payload = shake.session.open_body(shake.length, data)  # AuthError: changed on the way
        self._proved.pop(shake.sock, None)
        self._selector.unregister(shake.sock)
        try:
            self._admitted(shake.sock, shake.session, payload)
        except Exception as bad:  # noqa: BLE001 - one member's trouble never ends the loop
            self._say(f"dropped a member's connection: {bad!r}")
            shake.sock.close()
        return True

    def _challenge(self, shake: _Handshake) -> None:
        """Fresh -> challenged: it holds a slot that no newcomer takes."""
        self._unfresh(shake)
        self._challenged_from[shake.source] = self._challenged_from.get(shake.source, 0) + 1

    def _unfresh(self, shake: _Handshake) -> None:
        if self._fresh.pop(shake.sock, None) is None:
            return
        mine = self._fresh_from.get(shake.source)
        if mine is not None:
            mine.pop(shake.sock, None)
            if not mine:
                del self._fresh_from[shake.source]

    def _forget(self, shake: _Handshake) -> None:
        if self.waiting.pop(shake.sock, None) is None:
            return
        if shake.sock in self._fresh:
            self._unfresh(shake)
        else:
            left = self._challenged_from.get(shake.source, 1) - 1
            if left > 0:
                self._challenged_from[shake.source] = left
            else:
                self._challenged_from.pop(shake.source, None)
        left = self.pending.get(shake.source, 1) - 1
        if left > 0:
            self.pending[shake.source] = left
        else:
            self.pending.pop(shake.source, None)

    def _busy(self, shake: _Handshake) -> None:
        """No room to challenge it: say :data:`auth.BUSY` (one non-blocking send; unproved, it only tells an agent
        to try again, which it would do anyway) and close."""
        try:
            shake.sock.send(auth.BUSY)
        except OSError:
            pass
        self._drop(shake)

    def _drop(self, shake: _Handshake, *, failed: bool = False) -> None:
        """Close a handshake's connection; ``failed``: it failed the handshake (its source becomes suspect)."""
        if failed:
            self.suspects.mark(shake.source, time.monotonic())
        self._forget(shake)
        self._proved.pop(shake.sock, None)
        try:
            self._selector.unregister(shake.sock)
        except (KeyError, ValueError):
            pass
        shake.sock.close()
