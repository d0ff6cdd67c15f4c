"""The fields of a UDB entry in udbgen's directive language: names, defaults, parsers.

`FIELDS` says, for every field, how a directive's value text is parsed (with the
bounds of `udb.rules`), how it is printed back and its default; `udb.directives`
parses with it, `udb.plan` fills new entries from it, `udb.listing` prints with it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from udb.errors import DirectiveError
from udb.rules import (
    MAX_COMMENT,
    MAX_CPU_SECONDS,
    MAX_EPOCH,
    MAX_HALFLIFE,
    MAX_ID,
    MAX_PASSWD,
    MAX_SHARES,
    MAX_SHFLAGS,
    MAX_USAGE,
)

#: The verbs a directive can start with.
VERBS = ("create", "update", "delete", "acid", "delacid")

#: The guide's MAXVIDS: the most account IDs one entry may list.
MAXVIDS = 64

#: Entry and account names: no blanks, no ``:`` or ``,`` (the separators), not starting with #.
NAME_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@$+-]{0,63}")

# -- fields -----------------------------------------------------------------------------


def _bounded(text: str, lo: int, hi: int, what: str = "a whole number") -> int:
    s = text.strip()
    digits = s[1:] if s[:1] in "+-" and lo < 0 else s
    # Too many digits is out of range before int() (which refuses over 4300 digits).
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 20:
        raise ValueError(f"expected {what} from {lo} to {hi}")
    value = int(s)
    if not lo <= value <= hi:
        raise ValueError(f"expected {what} from {lo} to {hi}")
    return value


def parse_uint(text: str) -> int:
    """A uid, gid or account number: 0 to MAX_ID."""
    return _bounded(text, 0, MAX_ID)


def _shares(text: str) -> int:
    return _bounded(text, 0, MAX_SHARES)


def _nice(text: str) -> int:
    return _bounded(text, -20, 19, "a nice value")


def _ufloat_upto(hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value <= hi:  # NaN and infinities too
            raise ValueError(f"expected a number from 0 to {hi:g}")
        return value

    return parse


def _octal(text: str) -> int:
    s = text.strip()
    if not s or not s.isascii() or s.strip("01234567") or int(s, 8) > MAX_SHFLAGS:
        raise ValueError(
            f"expected an octal number such as 040000 or 01000000, at most 0{MAX_SHFLAGS:o}"
        )
    return int(s, 8)


def _uint_list(text: str) -> list[int]:
    if not text.strip():
        return []
    try:
        return [parse_uint(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"expected comma-separated whole numbers from 0 to {MAX_ID}") from None


def _acid_list(text: str) -> list[int | str]:
    """Account IDs as numbers or registered names; names are resolved when applied."""
    if not text.strip():
        return []
    out: list[int | str] = []
    for part in text.split(","):
        s = part.strip()
        if s.isascii() and s.isdigit():
            try:
                out.append(parse_uint(s))
            except ValueError:
                raise ValueError(f"expected account numbers from 0 to {MAX_ID}") from None
        elif NAME_RE.fullmatch(s):
            out.append(s)
        else:
            raise ValueError("expected comma-separated account numbers or names")
    if len(out) > MAXVIDS:
        raise ValueError(f"at most {MAXVIDS} account IDs (MAXVIDS)")
    return out


def _uid_or_name(text: str) -> int | str:
    s = text.strip()
    if s.isascii() and s.isdigit():
        return parse_uint(s)
    if NAME_RE.fullmatch(s):
        return s
    raise ValueError("expected a resource group's uid or name")


#: Seconds per unit of a half-life (udbgen's halflife field: 8h, 5d, 90m, 3600s, 3600).
_HALFLIFE_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _halflife(text: str) -> float:
    """A node's usage half-life in seconds: 0 (inherit) or 1 s to 3650 d, as a number of
    seconds or with a unit s, m, h or d."""
    s = text.strip()
    unit = s[-1:] if s[-1:] in ("s", "m", "h", "d") else ""
    try:
        value = float(s[: len(s) - len(unit)]) * _HALFLIFE_UNITS[unit]
    except ValueError:
        value = math.nan
    if not (value == 0 or 1 <= value <= MAX_HALFLIFE):
        raise ValueError("expected 0 (inherit) or a half-life from 1 s to 3650d, such as 8h")
    return value


#: The usage scopes an entry may set (udbgen's scope field; '' inherits its parent's).
SCOPES = ("", "local", "global")


def _scope(text: str) -> str:
    """An entry's usage scope: local, global, or empty (inherit its parent's)."""
    s = text.strip().lower()
    if s not in SCOPES:
        raise ValueError("expected local, global or nothing (inherit)")
    return s


def _yes_no(text: str) -> int:
    """A flag: yes/no, on/off, true/false or 1/0, as 1 or 0."""
    s = text.strip().lower()
    if s in ("1", "yes", "on", "true"):
        return 1
    if s in ("0", "no", "off", "false"):
        return 0
    raise ValueError("expected yes or no")


def _fmt_yes_no(value: object) -> str:
    return "yes" if value else "no"


def _text_upto(limit: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if len(text) > limit or not text.isprintable():
            raise ValueError(f"expected printable text of at most {limit} characters")
        return text

    return parse


def _fmt_list(values: list[int]) -> str:
    return ",".join(map(str, values))


def _fmt_octal(value: int) -> str:
    return f"0{value:o}" if value else "0"


@dataclass(frozen=True)
class Field:
    """One UDB field of the directive language: how to read and write its value."""

    name: str
    parse: Callable[[str], object]
    format: Callable[[object], str]
    default: object
    doc: str


#: Every field a directive may set, in the order udbsee prints them.
FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("uid", parse_uint, str, None, "user ID (for a shareholder, its account number)"),
        Field("gids", _uint_list, _fmt_list, [], "group IDs, comma-separated"),
        Field("acids", _acid_list, _fmt_list, [], "account IDs or names; the first is default"),
        Field("resgrp", _uid_or_name, str, 0, "uid or name of the parent resource group"),
        Field("shares", _shares, str, 0, "allocated shares"),
        Field("shflags", _octal, _fmt_octal, 0, "octal: 040000 group, 01000000 account"),
        Field("shusage", _ufloat_upto(MAX_USAGE), repr, 0.0, "decayed usage (charge units)"),
        Field("shcharge", _ufloat_upto(MAX_USAGE), repr, 0.0, "long-term charge (charge units)"),
        Field("shextime", _ufloat_upto(MAX_EPOCH), repr, 0.0, "time the user last left (epoch s)"),
        Field("cpuquota", _ufloat_upto(MAX_CPU_SECONDS), repr, 0.0, "CPU quota (CPU s, 0 = none)"),
        Field("cpuquotaused", _ufloat_upto(MAX_CPU_SECONDS), repr, 0.0, "CPU s used of the quota"),
        Field("nice", _nice, str, 0, "default nice value, -20..19"),
        Field("halflife", _halflife, repr, 0.0, "usage half-life (s) of its subtree, 0 inherit"),
        Field("scope", _scope, str, "", "usage it divides by: local, global; '' inherit"),
        Field("pooled", _yes_no, _fmt_yes_no, 0, "yes: members not ranked against each other"),
        Field("passwd", _text_upto(MAX_PASSWD), str, "", "password hash; * means no login"),
        Field("comment", _text_upto(MAX_COMMENT), str, "", "free text (printable)"),
    )
}

#: Other spellings the guide uses for a field.
ALIASES = {"gid": "gids"}

#: The guide's set, add and remove operators (4.3.1: ``acids = + - :n1,n2:``, ``shflags =
#: + - :octal:``): ``FIELD=`` sets like ``FIELD``, ``FIELD+`` adds the listed acids (or
#: ORs the flag bits in), ``FIELD-`` removes them (clears the bits).
OPERATOR_FIELDS = ("acids", "shflags")

#: A directive token's field: a field name, an alias, or ``FIELD=``/``FIELD+``/``FIELD-``
#: (``acids=`` is ``acids``; ``acids+`` and ``acids-`` stay as they are, applied by udb.plan).
FIELD_OF = {
    **{n: n for n in FIELDS},
    **ALIASES,
    **{f"{n}=": n for n in OPERATOR_FIELDS},
    **{f"{n}{op}": f"{n}{op}" for n in OPERATOR_FIELDS for op in "+-"},
}

#: The UDB field each FIELD_OF value changes (``acids+`` changes ``acids``).
BASE_FIELD = {v: v.rstrip("+-") for v in FIELD_OF.values()}

#: How each FIELD_OF value's text is parsed (an operator parses as its field does).
PARSERS = {v: FIELDS[b].parse for v, b in BASE_FIELD.items()}

DEFAULTS = {n: f.default for n, f in FIELDS.items() if n != "uid"}


def shown_passwd(passwd: str) -> str | None:
    """The passwd as udbsee may show it: ``*`` or empty as they are, None for a hash."""
    return passwd if passwd in ("", "*") else None


# -- a parsed directive (udb.directives parses, udb.plan applies) ----------------------


@dataclass(slots=True)
class Directive:
    """One parsed directive and where it came from.

    `fields` holds (field name, value, token index) triples with values already
    converted (resgrp and acids may still hold names, resolved when applied);
    for ``acid`` the number is `fields[0]`'s value.  `text` is the whole source
    line, kept so that columns are only worked out for an error.
    """

    verb: str
    name: str
    fields: list[tuple[str, object, int]]
    source: str
    line: int
    token: int
    text: str
    seq: int = 0  # its place in the run, set when applied; orders errors

    def col(self, token: int | None = None) -> int:
        """The 1-based column of token `token` of the line (the verb by default)."""
        return token_column(self.text, self.token if token is None else token)

    def error(self, message: str, token: int | None = None) -> DirectiveError:
        """A DirectiveError at this directive (or one of its tokens), naming it."""
        return DirectiveError(
            self.source, self.line, self.col(token), f"{self.verb}:{self.name}: {message}"
        )

    @property
    def key(self) -> int:
        """Sort key: its place in the run (files, then -c, then --passwd, in order)."""
        return self.seq


def token_column(text: str, token: int) -> int:
    """The 1-based column of token `token` (split on colons) of directive line `text`."""
    parts = text.split(":")
    col = sum(len(p) + 1 for p in parts[:token]) + 1
    if token < len(parts):
        part = parts[token]
        col += len(part) - len(part.lstrip())
    return col
