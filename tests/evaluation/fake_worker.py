"""A stand-in worker for the process-management tests (error paths only; no torch, no GPU).

It speaks the real protocol (pickled ``protocol`` commands in, JSON ``Reply`` out on the given descriptors),
says hello, then misbehaves on its first command according to ``--mode``: ``echo`` answers properly (but,
having no GPU, never writes an output), ``hang`` never answers, ``crash`` dies by SIGSEGV, ``exit`` exits
with code 3, ``garbage`` writes bytes that are not a reply, ``wrong_seq`` answers another command,
``oversize`` answers with 2 MiB, ``stall`` starts a reply frame and never ends it,
``ahead`` answers its first command and the next three before they are sent, then stops reading,
``child`` forks a sleeping grandchild and then hangs (for the process-group
kill), ``slow`` answers every command properly but only after ``--delay`` seconds (a candidate whose calls
each return slowly), ``flood`` prints ``--flood-mib`` MiB and a last line ``END OF FLOOD`` to stdout
before each proper answer (a printf flood), ``fds`` receives one file descriptor from its stdin (the fd
socket) per command and answers with the first bytes read from it in ``error`` (the fd-passing channel),
``busy`` answers like ``echo`` but each call takes (busy-waiting) and reports the GPU time a busy no-op
would: 5 us plus 30 us per memset of the last ``Load.busy_memsets`` (a loaded candidate: 1 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import time
from multiprocessing.connection import Connection


def _reply(seq: int, **extra) -> bytes:
    return json.dumps({"seq": seq, "ok": True, **extra}).encode()


def _payload(cmd) -> dict:
    """What a well-behaved worker would add to its reply (it never touches the output buffers)."""
    if cmd.op == "call":
        return {"call": {"ev_stream_ms": 1.0, "ev_device_ms": 1.02, "host_ms": 1.0}}
    if cmd.op == "trial_end":
        return {"spans": {}}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--flood-mib", type=float, default=3.0)
    args = parser.parse_args()
    conn_in = Connection(args.fd_in, writable=False)
    conn_out = Connection(args.fd_out, readable=False)
    import ptxgym.evaluation.protocol  # noqa: F401 - warm, as a real worker is, before saying hello

    hello = {"pid": os.getpid(), "device": 0, "warm_s": 0.0, "torch": "none"}
    conn_out.send_bytes(_reply(0, hello=hello))
    if args.mode == "child":
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
    busy: int | None = 0
    while True:
        try:
            cmd = pickle.loads(conn_in.recv_bytes())
        except EOFError:
            return
        seq = cmd.seq
        if args.mode == "busy":
            if cmd.op == "load":
                busy = cmd.busy_memsets if cmd.kind == "noop" else None
            payload = _payload(cmd)
            if cmd.op == "call":
                ms = 1.0 if busy is None else 0.005 + 0.03 * busy
                until = time.perf_counter() + ms / 1e3  # the call takes as long as it says
                while time.perf_counter() < until:
                    pass
                payload["call"] = {"ev_stream_ms": ms, "ev_device_ms": ms + 0.02, "host_ms": ms}
            conn_out.send_bytes(_reply(seq, **payload))
        elif args.mode == "echo":
            conn_out.send_bytes(_reply(seq, **_payload(cmd)))
        elif args.mode == "ahead":  # answers, then answers the next commands before they are sent
            for k in range(4):
                conn_out.send_bytes(_reply(seq + k, **_payload(cmd)))
            time.sleep(600)
        elif args.mode == "slow":
            time.sleep(args.delay)
            conn_out.send_bytes(_reply(seq, **_payload(cmd)))
        elif args.mode == "flood":
            line = b"x" * 1023 + b"\n"
            for _ in range(int(args.flood_mib * 1024)):
                sys.stdout.buffer.write(line)
            sys.stdout.buffer.write(b"END OF FLOOD\n")
            sys.stdout.flush()
            conn_out.send_bytes(_reply(seq, **_payload(cmd)))
        elif args.mode == "fds":
            import socket

            with socket.socket(fileno=os.dup(0)) as channel:
                channel.settimeout(10.0)
                _, fds, _, _ = socket.recv_fds(channel, 1, 1)
            text = os.read(fds[0], 64).decode()
            for fd in fds:
                os.close(fd)
            conn_out.send_bytes(_reply(seq, error=text))
        elif args.mode in ("hang", "child"):
            time.sleep(600)
        elif args.mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif args.mode == "exit":
            print("about to exit", flush=True)
            os._exit(3)
        elif args.mode == "garbage":
            conn_out.send_bytes(b"\x00not a reply{")
        elif args.mode == "wrong_seq":
            conn_out.send_bytes(_reply(seq + 5))
        elif args.mode == "oversize":
            conn_out.send_bytes(b" " * (2 << 20))
        elif args.mode == "stall":  # a frame header promising 4096 bytes, 10 of them, then nothing
            os.write(conn_out.fileno(), (4096).to_bytes(4, "big") + b"{" * 10)
            time.sleep(600)


if __name__ == "__main__":
    main()
