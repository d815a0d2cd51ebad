"""`hutch shell ID`: this terminal, attached to a terminal in a sandbox.

The local terminal goes raw, so keys (^C, ^Z, arrows) reach the box's programs as typed; a window
change is passed on as a resize; the remote shell's exit code becomes ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty

from hutch.sdk import AsyncProcess, AsyncSandbox, PtySize

LOGIN_SHELL = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"


def _size(fd: int) -> PtySize:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return PtySize(24, 80)
    return PtySize(max(1, min(size.lines, 1000)), max(1, min(size.columns, 1000)))


async def run_shell(sandbox_id: str, command: str | None, user: str | None) -> int:
    stdin_fd, out = sys.stdin.fileno(), sys.stdout.buffer
    sb = await AsyncSandbox.connect(sandbox_id)

    def show(text: str) -> None:
        out.write(text.encode())
        out.flush()

    try:
        proc = await sb.commands.spawn(command or LOGIN_SHELL, pty=_size(stdin_fd), user=user, on_stdout=show)
        try:
            return await _attached(proc, stdin_fd)
        finally:
            await proc.close()
    finally:
        await sb.close()


async def _attached(proc: AsyncProcess, stdin_fd: int) -> int:
    """Pass keys and window changes to the process until it exits; its exit code."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[bytes | None] = asyncio.Queue()  # None: the window changed

    async def forward() -> None:
        while True:
            data = await inbox.get()
            if data is None:
                await proc.resize(*_size(stdin_fd))
            elif data:
                await proc.stdin.write(data)
            else:  # our stdin ended
                loop.remove_reader(stdin_fd)
                await proc.stdin.close()

    saved = termios.tcgetattr(stdin_fd) if os.isatty(stdin_fd) else None
    forwarder = asyncio.create_task(forward())
    waiter = asyncio.create_task(proc.wait())
    try:
        if saved is not None:
            tty.setraw(stdin_fd)
        loop.add_reader(stdin_fd, lambda: inbox.put_nowait(os.read(stdin_fd, 65536)))
        loop.add_signal_handler(signal.SIGWINCH, lambda: inbox.put_nowait(None))
        await asyncio.wait({waiter, forwarder}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():  # the keys could not be delivered: say why rather than swallow them
            forwarder.result()
        return waiter.result()
    finally:
        for task in (forwarder, waiter):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        loop.remove_reader(stdin_fd)
        loop.remove_signal_handler(signal.SIGWINCH)
        if saved is not None:
            termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)
