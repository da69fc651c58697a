"""Control characters made visible, for everything chrono shows a human: chronoctl's output
and chronod's log lines.

Escaped: C0 and C1 controls, DEL, every bidi control of Unicode (the marks, the Arabic
letter mark among them, embeddings, overrides and isolates: they reorder what a terminal
shows, "Trojan source"), line and paragraph separators, and lone surrogates (undecodable
bytes smuggled through surrogateescape).
"""

from __future__ import annotations

import re
from typing import Any

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def visible(ch: str) -> str:
    """One control character as text: `\\x1b`, `\\u202e` (a lone surrogate as its byte)."""
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_control(text: Any, keep: str = "\n\t") -> str:
    """`text` with every control character made visible (`\\x1b`, `\\u202e`), except those in `keep`.

    Backslashes are left alone, so a literal `\\x1b` typed in a command looks the same as an
    escaped ESC; what matters is that nothing reaches the terminal as a control sequence.
    """
    s = text if isinstance(text, str) else str(text)
    return CONTROL.sub(lambda m: m.group() if m.group() in keep else visible(m.group()), s)
