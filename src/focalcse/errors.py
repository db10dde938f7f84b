"""The errors a stage reports in one line (a bad input the user fixes), and the retry exit status.

A module of its own, importing nothing, so that the stage entry points' error hook
(``stages/_common.py``) does not make every DVC stage depend on the training loop or the data readers.
The classes are re-exported where they are raised (``focalcse.core.training``, ``focalcse.data.corpus``,
``focalcse.data.sts``, ``focalcse.ops.tracking``).
"""

from __future__ import annotations

EX_TEMPFAIL = 75  # sysexits.h: temporary failure, the caller may retry


class ConfigError(ValueError):
    """A params value that is missing, of the wrong type or out of range (re-exported by
    :mod:`focalcse.config`)."""


class CorpusError(ValueError):
    """A corpus that cannot be used; the message names the file (and line)."""


class StsDataError(ValueError):
    """A malformed STS file; the message names the file and line."""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf."""


class TrackingUnavailableError(ConnectionError):
    """The tracking server cannot be reached (transient: stages exit with EX_TEMPFAIL)."""
