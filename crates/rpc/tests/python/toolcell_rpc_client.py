"""Reference client for the toolcell tool RPC. Standard library only.

The protocol is described in docs/protocol.md ("The tool socket").

The generated stub module ``toolcell_tools`` follows the same rules:

* the endpoint and token come from ``TOOLCELL_RPC`` (``unix:/path`` or
  ``tcp://127.0.0.1:PORT``) and ``TOOLCELL_RPC_TOKEN``;
* each request is one JSON line ``{"tool", "args", "token"}``, each reply one
  JSON line ``{"ok": true, "result"}`` or ``{"ok": false, "code", "error"}``;
* one connection per thread (and per process: a forked child opens its own),
  so threads call tools in parallel;
* it reconnects only *before* sending. Once a request has been sent, a lost
  connection raises ``ToolError`` saying the outcome is unknown: a call is
  never replayed;
* a call interrupted between sending and reading its reply (e.g.
  ``KeyboardInterrupt``) drops its connection, so a late reply can never be
  taken for the answer to the next call.
"""

import json
import os
import select
import socket
import threading

__all__ = ["ToolError", "call"]


class ToolError(Exception):
    """A tool call was refused or failed; ``code`` is the documented code, if any."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


_local = threading.local()


def _connect():
    endpoint = os.environ.get("TOOLCELL_RPC", "")
    if endpoint.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(endpoint[len("unix:"):])
    elif endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://"):].rpartition(":")
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        raise ToolError("TOOLCELL_RPC is not set to unix:/path or tcp://host:port; "
                        "tool calls only work inside a toolcell kernel")
    return sock, sock.makefile("rb")


def _usable(conn):
    """A connection is reusable if it belongs to this process and the server
    has not closed it (nothing is readable between calls)."""
    if conn is None or conn[2] != os.getpid():
        return False
    try:
        poller = select.poll()
        poller.register(conn[0], select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def _drop():
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None and conn[2] == os.getpid():
        try:
            conn[1].close()
            conn[0].close()
        except OSError:
            pass


def call(tool, **args):
    """Calls host tool ``tool`` with keyword arguments; returns its result."""
    line = json.dumps({"tool": tool, "args": args,
                       "token": os.environ.get("TOOLCELL_RPC_TOKEN", "")}).encode() + b"\n"
    conn = getattr(_local, "conn", None)
    if not _usable(conn):
        _drop()  # reconnecting is safe: nothing has been sent yet
        try:
            sock, rfile = _connect()
        except OSError as e:
            raise ToolError("cannot reach the toolcell host at %s: %s"
                            % (os.environ.get("TOOLCELL_RPC"), e)) from None
        conn = _local.conn = (sock, rfile, os.getpid())
    sock, rfile, _ = conn
    err = None
    try:
        try:
            sock.sendall(line)
        except OSError as e:
            err = e  # the server may still have answered (e.g. refused us) before closing
        try:
            reply = rfile.readline()
        except OSError as e:
            reply, err = b"", err or e
    except BaseException:
        # Interrupted (KeyboardInterrupt from a host interrupt, ...) between
        # sending and reading: the reply may still come, and must never be
        # read as the answer to a later call. Drop the connection.
        _drop()
        raise
    if not reply.endswith(b"\n"):
        _drop()
        raise ToolError("connection to the toolcell host was lost after the %s call was sent%s; "
                        "its outcome is unknown (it may or may not have run) and it was not retried"
                        % (tool, " (%s)" % err if err else ""))
    msg = json.loads(reply)
    if msg.get("ok"):
        return msg.get("result")
    raise ToolError(msg.get("error", "tool call failed"), msg.get("code"))
