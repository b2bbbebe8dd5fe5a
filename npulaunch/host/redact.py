"""Secrets masked wherever npulaunch shows or stores them (``plan``, ``plan --json``, plan.json,
events.jsonl, the console): values of environment variables with secret-looking names, credentials
inside URLs, and the values of ``--token``-style arguments. The ranks still receive the real values;
only what is displayed or recorded is masked. Standard library only, Python 3.7+.

Names: a variable is secret when its name contains TOKEN, PASSWORD, PASSWD, SECRET, CREDENTIAL or
KEY (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``MY_API_KEY``), or when one of its ``_``-separated
words is PASS, PAT or AUTH (``SMTP_PASS``, ``GITHUB_PAT``, ``REGISTRY_AUTH``; not ``PATH``).
"""

from __future__ import annotations

import functools
import re
from typing import Dict, List, Mapping, Sequence

from npulaunch.host.lazyre import lazy_re

REDACTED = "***"
SECRET_MARKERS = ("TOKEN", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "KEY")
SECRET_WORDS = frozenset(("PASS", "PAT", "AUTH"))
# --api-key, --token, --hf-token, --password, --secret, --access-key, --auth, ... with = or as the next
# argument; the secret word ends the flag's name, so --max_new_tokens or --tokenizer are left alone
_SECRET_FLAG = lazy_re(
    r"^(--?(?:[A-Za-z0-9]+[-_])*(?:token|password|passwd|pass|secret|api[-_]?key|access[-_]?key|credentials?|auth))"
    r"(=.*)?$",
    re.IGNORECASE,
)
# scheme://user:password@host -> scheme://user:***@host (and scheme://token@host is left: no password part)
_URL_CREDENTIALS = lazy_re(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@")


@functools.lru_cache(maxsize=4096)  # the same few dozen names, once per rank
def is_secret(name: str) -> bool:
    upper = name.upper()
    if any(marker in upper for marker in SECRET_MARKERS):
        return True
    return any(word in SECRET_WORDS for word in re.split(r"[^A-Z0-9]+", upper))


def redact_text(value: str) -> str:
    """``value`` with the password of every URL in it masked."""
    return _URL_CREDENTIALS.sub(r"\1" + REDACTED + "@", value) if "://" in value else value


def redact_env(env: Mapping[str, str]) -> Dict[str, str]:
    """A copy fit for display: values of secret-looking names replaced, URL passwords masked."""
    return {name: (REDACTED if is_secret(name) else redact_text(value)) for name, value in env.items()}


def redact_argv(argv: Sequence[str]) -> List[str]:
    """A command line fit for display: ``--token X`` / ``--token=X`` (and the like) and URL
    passwords masked."""
    shown: List[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(REDACTED)
            hide_next = False
            continue
        match = _SECRET_FLAG.match(arg)
        if match and match.group(2) is not None:
            shown.append(match.group(1) + "=" + REDACTED)
        elif match:
            shown.append(arg)
            hide_next = True
        else:
            shown.append(redact_text(arg))
    return shown
