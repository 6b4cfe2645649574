"""Reading user options where they arrive (a REST body in either of JupyterHub's shapes, a form
post, a query string) by one set of rules: nothing is dropped, and what cannot be read is refused
with a message that names it.  Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from gpuspawner.spawn.options import FORBIDDEN_OPTION, OTHER, OptionError, check_size, names, printable, show

#: KubeSpawner's form field names: ``profile-option-<profile slug>--<option>``
FORM_OPTION_PREFIX = "profile-option-"
UNLISTED_SUFFIX = "--unlisted-choice"
# the keys of JupyterHub 6's newer server request shape (jupyterhub/apihandlers/users.py
# ``UserServerAPIHandler.get_server_json_body``): a body with either is read as
# {"display_name": ..., "user_options": ...} and its other keys are dropped
SERVER_BODY_KEYS = ("display_name", "user_options")
# what ``PATCH /hub/api/users/{name}/servers/{server}`` takes (the same handler's ``patch``)
PATCH_BODY_KEYS = ("name", "display_name", "user_options")
# tornado's own form field (the XSRF token may be posted in the form): never an option
XSRF_FIELD = "_xsrf"

__all__ = [
    "FORM_OPTION_PREFIX",
    "options_from_form",
    "options_from_query",
    "dropped_query_names",
    "server_body_options",
    "check_patch_body",
]


def server_body_options(body: Any) -> Any:
    """The user options of a parsed ``POST``/``PUT /hub/api/users/{name}/server[s/{server}]`` body.

    JupyterHub 6 reads a body with a top-level ``display_name`` or ``user_options`` as
    ``{"display_name": ..., "user_options": {...}}`` and any other body as the options
    themselves.  A body of the newer shape that also carries other keys would have them dropped
    (``{"profile": "gpu", "gpus": 2, "display_name": "train"}`` started the default server):
    it is refused, naming them.  Returns the options (None: the body names none, and JupyterHub
    reuses the ones saved last); a body that is not a JSON object is returned as it is, for
    JupyterHub's own 400.
    """
    if not body:
        return None  # JupyterHub reads an empty body (or `{}`, `[]`, `0`) as "no options"
    if not isinstance(body, Mapping):
        return body
    shaped = [k for k in SERVER_BODY_KEYS if k in body]
    if not shaped:
        return dict(body)
    extra = [k for k in body if k not in SERVER_BODY_KEYS]
    if extra:
        raise OptionError(
            f"the body has {names(shaped)} at the top level, so JupyterHub reads its options from "
            f"`user_options` alone and would ignore {names(extra)}: send "
            '{"display_name": "...", "user_options": {"profile": "gpu", "gpus": 2}}, '
            "or leave out `display_name` and `user_options` and send the options themselves",
            reason=FORBIDDEN_OPTION,
        )
    return body.get("user_options")


def check_patch_body(body: Any) -> None:
    """Refuse a ``PATCH`` of a server whose body is not an object of the keys JupyterHub takes
    (which it would answer with a 500, or store)."""
    if not isinstance(body, Mapping):
        raise OptionError('the body must be a JSON object like {"user_options": {"profile": "gpu"}}', reason=OTHER)
    extra = sorted(str(k) for k in body if k not in PATCH_BODY_KEYS)
    if extra:
        raise OptionError(
            f"a server can be changed in {names(list(PATCH_BODY_KEYS))} only, not {names(extra)}; "
            'options go in `user_options`: {"user_options": {"profile": "gpu", "gpus": 2}}',
            reason=FORBIDDEN_OPTION,
        )
    if "user_options" in body and not isinstance(body["user_options"], Mapping):
        raise OptionError('`user_options` must be a JSON object like {"profile": "gpu"}', reason=OTHER)


def _single_values(data: Mapping[str, Sequence[Any]], where: str) -> dict[str, Any]:
    repeated = sorted(k for k, v in data.items() if not isinstance(v, (list, tuple)) or len(v) != 1)
    if repeated:
        raise OptionError(f"give each option once in the {where}; given more than once: {names(repeated)}",
                          reason=OTHER)
    return {k: v[0] for k, v in data.items()}


def _read(
    data: Mapping[str, Sequence[Any]],
    where: str,
    page_fields: Mapping[str, Collection[str]] | None,
    default_profile: str | None,
) -> dict[str, Any]:
    """The one reader of form posts and query strings.  ``page_fields``: the option names each
    profile shows on the spawn page (a form post carries every profile's fields, and those of
    the profiles not chosen are the page's, not the request); None for a query, where naming
    another profile's field is a mistake."""
    flat = _single_values(data, where)
    not_text = sorted(k for k, v in flat.items() if not isinstance(v, str))
    if not_text:
        raise OptionError(f"options are text fields; {names(not_text)} is not (a file upload?)", reason=OTHER)
    given = flat.get("profile")
    slug = given or default_profile
    options: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key, value in flat.items():
        if key == XSRF_FIELD:
            continue
        name = key
        if key.startswith(FORM_OPTION_PREFIX):
            owner, sep, name = key[len(FORM_OPTION_PREFIX):].partition("--")
            if not sep or not owner or not name:
                raise OptionError(
                    f"{names([key])} is not an option name: form names look like "
                    "`profile-option-<profile>--<option>`, or use the option's own name (`gpus`)",
                    reason=FORBIDDEN_OPTION,
                )
            if owner != slug:
                base = name[: -len(UNLISTED_SUFFIX)] if name.endswith(UNLISTED_SUFFIX) else name
                if page_fields is not None and base in page_fields.get(owner, ()):
                    continue  # another profile's field on the page: not part of this request
                fix = f"add profile={printable(owner)}" if page_fields is None else f"choose profile {show(owner)}"
                raise OptionError(
                    f"{names([key])} is an option of profile {show(owner)}, but the {where} chooses "
                    f"{'profile ' + show(slug) if given else 'no profile'}; {fix} or drop it",
                    reason=FORBIDDEN_OPTION,
                )
        if name in options:
            raise OptionError(
                f"option {names([name])} is given twice in the {where} (as {names([spelled[name], key])})",
                reason=OTHER,
            )
        options[name] = value
        spelled[name] = key
    check_size(options)
    return options


def options_from_query(query: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The user options of a query-string spawn (``GET /hub/spawn/<user>?profile=gpu&gpus=2``).

    JupyterHub hands the query's arguments over as lists of strings, after taking out ``next``
    and ``display_name`` (and the ``opt-`` prefix, when every name carries it).  Both spellings
    of an option are read: the REST API's (``gpu_pool``, ``gpus``, ``image``) and the spawn
    form's (``profile-option-gpu--gpus``), so a link can be copied from either.  A name given
    twice, a form name of another profile than the one chosen, or a form name that is not one
    is refused here; unknown names are refused with the rest of the options by
    ``options.validate_user_options``.
    """
    return _read(query, "query", None, None)


def options_from_form(
    form: Mapping[str, Sequence[Any]],
    page_fields: Mapping[str, Collection[str]],
    default_profile: str | None,
) -> dict[str, str]:
    """The user options of a spawn form post, read as a query is (:func:`options_from_query`):
    the REST names (``gpu_pool``, ``gpus``) mean what they mean in REST, and every other name is
    kept for validation to refuse by name.  The one difference: the page posts every profile's
    fields, so a field of a profile not chosen that the page shows (``page_fields``: option
    names per profile slug) is dropped; any other is refused."""
    return _read(form, "form", page_fields, default_profile)


def dropped_query_names(raw: Iterable[str]) -> list[str]:
    """The query's names that JupyterHub does not hand to the spawner: when a query mixes
    ``opt-`` names with plain ones, JupyterHub 5+ reads only the ``opt-`` ones
    (jupyterhub/handlers/pages.py ``SpawnHandler._get_user_options``); ``next`` and
    ``display_name`` are JupyterHub's own."""
    keys = [k for k in raw if k not in ("next", "display_name")]
    plain = sorted(k for k in keys if not k.startswith("opt-"))
    return plain if plain and len(plain) < len(keys) else []
