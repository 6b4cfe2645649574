"""What of a refused request's options the spawn page shows again as the user's choices."""

from __future__ import annotations

from typing import Any

__all__ = ["form_choices"]

# a form field's value is short; anything longer is not a choice the form made
_MAX_VALUE = 512


def form_choices(user_options: Any) -> dict[str, str]:
    """The options of a refused request as the form's choices: string keys with string or whole-number
    values only (the form compares them with its own choices and puts free text back in its field,
    autoescaped); anything else is left out."""
    out: dict[str, str] = {}
    if not isinstance(user_options, dict):
        return out
    for key, value in user_options.items():
        if not isinstance(key, str) or isinstance(value, bool):
            continue
        if isinstance(value, int):
            value = str(value)
        if isinstance(value, str) and len(value) <= _MAX_VALUE:
            out[key] = value
    return out
