"""Secrets hidden from what tfdist keeps or shows: a command line as recorded in a run record or printed in a plan.

A training command often carries a credential: ``--hf-token=...``, ``--password hunter2``, ``WANDB_API_KEY=...``
before the script, or ``https://user:password@host`` in a data URL. :func:`mask_command` keeps the shape of the command
(every word stays, so it still reads as what was run) and replaces each secret value with ``****``. It errs towards
masking: a value after a flag whose name ends in a secret-sounding word is masked even when it was harmless.
"""
from __future__ import annotations

import re
from typing import Iterable

from tfdist.mirror.urls import MASK, mask_secrets

# The last word of a flag or variable name that says its value is a secret (--hf-token, DB_PASSWORD, --api-key).
_SECRET_NAME = re.compile(r"(?i)(?:^|[-_.])(?:pass|passwd|password|passphrase|secret|token|key|apikey|credentials?"
                          r"|auth|cookie|signature)\Z")
_FLAG = re.compile(r"(-{1,2})([A-Za-z0-9][A-Za-z0-9_.-]*)")
_FLAG_WITH_VALUE = re.compile(r"(-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*)=(.*)", re.DOTALL)
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable called ``name`` (without dashes) holds a secret."""
    return bool(_SECRET_NAME.search(name))


def mask_word(word: str) -> str:
    """One word with a secret value masked: ``--token=abc``, ``API_KEY=abc``, ``https://u:pw@host``."""
    for pattern in (_FLAG_WITH_VALUE, _VARIABLE):
        match = pattern.fullmatch(word)
        if match and match.group(2) and is_secret_name(match.group(1).lstrip("-")):
            return f"{match.group(1)}={MASK}"
    return mask_secrets(word)


def mask_command(words: Iterable[str]) -> tuple[str, ...]:
    """``words`` with every secret value replaced by ``****``, including the word after ``--token``-like flags."""
    masked: list[str] = []
    hide_next = False
    for word in words:
        if hide_next and not word.startswith("-"):
            masked.append(MASK)
            hide_next = False
            continue
        flag = _FLAG.fullmatch(word)
        hide_next = bool(flag and is_secret_name(flag.group(2)))
        masked.append(mask_word(word))
    return tuple(masked)
