"""Why ``torch.load(weights_only=True)`` refused some bytes, in words fit for
an error message of lazystore's (a torch zip converted, a DCP chunk read)."""

from __future__ import annotations

import re
import textwrap

# ANSI escape sequences (CSI ... final byte, OSC ... BEL/ST): torch bolds part
# of its refusal, and the codes would reach a log or a terminal verbatim.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b")
# torch's refusal starts with advice for torch.load's callers (re-run with
# weights_only=False...), which a reader of an untrusted file must not take;
# what was refused follows this marker.
_UNPICKLER = "WeightsUnpickler error:"


def refusal_reason(exc: Exception, limit: int = 300) -> str:
    """Why torch refused a file, in one plain line: the unpickler's own
    reason when torch gives one, without escape codes, cut at a word."""
    text = _ANSI.sub("", str(exc))
    if _UNPICKLER in text:
        text = text.split(_UNPICKLER, 1)[1]
        text = text.split(". ", 1)[0].rstrip(".")  # the reason, not the allowlisting advice after it
    return textwrap.shorten(" ".join(text.split()), limit, placeholder=" ...") or type(exc).__name__
