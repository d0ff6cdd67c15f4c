"""The displays' continuous mode (shrview -c, shrtree -c): a full-screen Textual monitor.

A `Monitor` shows the lines a `View` renders, refreshed every `interval` seconds (the
share cycle by default, as the guide's continuous mode), and takes the keys a monitor is
expected to have (the guide's 4.4.11): its view's own keys (shrview: m a s n l g switch
the display, o the sort order), ``/`` to select a user or group (a prompt), ``p`` or
space to pause, ``+`` and ``-`` to slow down or speed up the refresh, ``r`` to refresh
now, ``?`` for help, ``q`` to quit.  The view does the work (`fairshare.tui.views`); the
monitor holds only the screen, the timer and the keys.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from udb.errors import OptionError, UdbError

#: The refresh interval's bounds (s): + and - double and halve it within them.
MIN_INTERVAL, MAX_INTERVAL = 0.25, 3600.0


def require_terminal(what: str) -> None:
    """OptionError (one line) unless standard input and output are a terminal."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise OptionError(
            f"{what}: continuous mode is a full-screen display and needs a terminal; "
            "use -r N for N displays one after the other"
        )


@dataclass(frozen=True)
class ViewKey:
    """A key of one view: what it does, in the help."""

    key: str
    help: str


class View(Protocol):
    """What a monitor shows: the lines of a frame, a status line, its own keys."""

    keys: tuple[ViewKey, ...]
    #: What ``/`` asks for ("" when the view selects nothing).
    prompt: str

    def frame(self, width: int, height: int) -> list[str]:
        """The lines to show now (reading the published state or the UDB afresh)."""

    def status(self) -> str:
        """What is shown, in one line: display, sort, selection."""

    def press(self, key: str) -> bool:
        """Apply one of `keys`; True when the frame must be rebuilt."""

    def select(self, text: str) -> None:
        """Apply what was typed at the prompt; UdbError when it names nothing."""


_COMMON = (
    ViewKey("/", "select a user or group (all, groups, users or a NAME)"),
    ViewKey("p", "pause or resume (space too)"),
    ViewKey("+ -", "refresh less or more often (double, halve the interval)"),
    ViewKey("r", "refresh now"),
    ViewKey("?", "this help (h too)"),
    ViewKey("q", "quit"),
)


class Monitor(App):
    """The full-screen monitor of one `View`; returns the number of frames it showed."""

    CSS = """
    #status { height: 1; background: $boost; }
    #help { display: none; border: round $accent; height: auto; }
    #help.shown { display: block; }
    #prompt { display: none; }
    #prompt.shown { display: block; }
    """

    def __init__(self, view: View, interval: float) -> None:
        super().__init__()
        self.view = view
        self.interval = min(max(interval, MIN_INTERVAL), MAX_INTERVAL)
        self.paused = False
        self.frames = 0
        self.message = ""
        self._timer = None

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(self._help_text(), id="help")
        # Disabled until / shows it: a hidden input would take the focus, and the keys.
        yield Input(id="prompt", placeholder=self.view.prompt, disabled=True)
        with VerticalScroll():
            yield Static(id="frame")

    def on_mount(self) -> None:
        self.show_frame()
        self._timer = self.set_interval(self.interval, self.tick)

    def tick(self) -> None:
        if not self.paused:
            self.show_frame()

    def show_frame(self) -> None:
        """Rebuild the frame from the view (an error of the view goes in the status)."""
        try:
            lines = self.view.frame(self.size.width, self.size.height)
            self.message = ""
        except UdbError as err:
            lines, self.message = [], str(err)
        self.query_one("#frame", Static).update(Text("\n".join(lines), no_wrap=True))
        self.frames += 1
        self.show_status()

    def show_status(self) -> None:
        state = "paused" if self.paused else f"every {self.interval:g} s"
        line = f"{self.view.status()}  [{state}]  ? help  q quit"
        if self.message:
            line += f"  -- {self.message}"
        self.query_one("#status", Static).update(Text(line, no_wrap=True))

    def _help_text(self) -> Text:
        keys = (*self.view.keys, *_COMMON)
        width = max(len(k.key) for k in keys)
        return Text("\n".join(f"{k.key:>{width}}  {k.help}" for k in keys))

    def _retime(self, factor: float) -> None:
        self.interval = min(max(self.interval * factor, MIN_INTERVAL), MAX_INTERVAL)
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(self.interval, self.tick)
        self.show_status()

    async def on_key(self, event: events.Key) -> None:
        prompt = self.query_one("#prompt", Input)
        if prompt.has_class("shown"):
            if event.key == "escape":
                self._hide(prompt)
                event.stop()
            return  # the prompt takes the keys
        key = event.character or event.key
        event.stop()
        if key == "q":
            self.exit(self.frames)
        elif key in ("p", " "):
            self.paused = not self.paused
            self.show_status()
        elif key == "+":
            self._retime(2.0)
        elif key == "-":
            self._retime(0.5)
        elif key == "r":
            self.show_frame()
        elif key in ("?", "h"):
            self.query_one("#help", Static).toggle_class("shown")
        elif key == "/" and self.view.prompt:
            prompt.disabled = False
            prompt.add_class("shown")
            prompt.value = ""
            prompt.focus()
        elif self.view.press(key):
            self.show_frame()

    def _hide(self, prompt: Input) -> None:
        prompt.remove_class("shown")
        prompt.disabled = True

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._hide(event.input)
        try:
            self.view.select(event.value.strip())
        except UdbError as err:
            self.message = str(err)
            self.show_status()
            return
        self.show_frame()
