"""`sandbox.desktop`: a desktop box's screen and input (a box of the `desktop` template), each call
written once for both fronts (hutch.sdk.front), sent by hutch.sdk.ops.desktop."""

from __future__ import annotations

from hutch.sdk.flow import Flow
from hutch.sdk.front import AsyncFront, SyncFront, call
from hutch.sdk.ops import desktop
from hutch.sdk.ops.sandboxes import DataPlane
from hutch.sdk.session import Session


class _DesktopBase:
    """Both fronts' `sandbox.desktop`. Coordinates are the screen's pixels, (0, 0) its top left."""

    def __init__(self, data_plane: DataPlane, session: Session) -> None:
        self._dp, self._session = data_plane, session

    @call
    def start(self, resolution: tuple[int, int] | None = None, dpi: int | None = None) -> Flow[None]:
        """Start the desktop (Xvfb and XFCE) at `resolution` (default 1024x768) unless it runs; a
        create from the `desktop` template (or with `resolution`) has done it already."""
        return desktop.start(self._dp, resolution, dpi)

    @call
    def screenshot(self) -> Flow[bytes]:
        """The screen as PNG bytes, the pointer drawn in: one call."""
        return desktop.screenshot(self._dp)

    @call
    def click(self, x: int | None = None, y: int | None = None, *, button: str = "left", count: int = 1) -> Flow[None]:
        """Click `button` ("left", "middle", "right") `count` times (2: a double click) at (x, y), or
        where the pointer is."""
        return desktop.click(self._dp, x, y, button, count)

    @call
    def move(self, x: int, y: int) -> Flow[None]:
        """Move the pointer to (x, y)."""
        return desktop.move(self._dp, x, y)

    @call
    def type(self, text: str) -> Flow[None]:
        """Type `text` into the focused window, as keystrokes."""
        return desktop.type_text(self._dp, text)

    @call
    def key(self, combo: str) -> Flow[None]:
        """Press a key or a combination, in xdotool's names: "Return", "ctrl+s", "ctrl+shift+t", "F5"."""
        return desktop.key(self._dp, combo)

    @call
    def scroll(self, direction: str = "down", amount: int = 1, *, x: int | None = None,
               y: int | None = None) -> Flow[None]:
        """Turn the wheel `amount` notches ("up", "down", "left", "right"), at (x, y) if given."""
        return desktop.scroll(self._dp, direction, amount, x, y)

    @call
    def drag(self, start: tuple[int, int], end: tuple[int, int], *, button: str = "left") -> Flow[None]:
        """Press `button` at `start`, move to `end`, release."""
        return desktop.drag(self._dp, start, end, button)

    @call
    def mouse_down(self, button: str = "left") -> Flow[None]:
        return desktop.press_button(self._dp, True, button)

    @call
    def mouse_up(self, button: str = "left") -> Flow[None]:
        return desktop.press_button(self._dp, False, button)

    @call
    def cursor_position(self) -> Flow[tuple[int, int]]:
        """Where the pointer is: (x, y)."""
        return desktop.cursor(self._dp)

    @call
    def screen_size(self) -> Flow[tuple[int, int]]:
        """(width, height) of the screen."""
        return desktop.screen_size(self._dp)

    @call
    def stream_url(self, *, access: str = "private", expires_in_seconds: int = 300) -> Flow[str]:
        """A browser's view of the live screen: noVNC's page at the box's preview URL (x11vnc and
        noVNC started in the box, their port published). Private by default: the URL is a signed
        link, good for `expires_in_seconds`, which the browser exchanges for a cookie for that
        port; access="public" publishes it for anyone with the URL."""
        return desktop.stream_url(self._dp, access, expires_in_seconds)


class Desktop(_DesktopBase, SyncFront):
    pass


class AsyncDesktop(_DesktopBase, AsyncFront):
    pass
