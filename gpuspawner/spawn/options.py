"""Validating a user's options: one place for the spawn form and the REST API."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspawner.spawn.cuda_fit import PoolFit
from gpuspawner.spawn.profiles import GPU_COUNT_OPTION, GPU_OPTIONS, GPU_POOL_OPTION, PoolOffer, ProfileOffer

# Names that would steer the pod if some layer ever copied user options onto
# the spawner (KubeSpawner's own trait names are added by the caller). They
# are refused outright rather than ignored so a client learns they do nothing.
TRAIT_LIKE = frozenset(
    {
        "image",
        "node_selector",
        "nodeSelector",
        "tolerations",
        "affinity",
        "node_affinity_required",
        "node_affinity_preferred",
        "resources",
        "limits",
        "requests",
        "extra_resource_limits",
        "extra_resource_guarantees",
        "cpu_limit",
        "cpu_guarantee",
        "mem_limit",
        "mem_guarantee",
        "kubespawner_override",
        "extra_pod_config",
        "extra_container_config",
        "namespace",
        "service_account",
        "privileged",
        "volumes",
        "volume_mounts",
        "env",
        "environment",
        "cmd",
        "args",
    }
)

_DIGITS = re.compile(r"[0-9]+")  # ASCII digits only (``str.isdigit`` also takes "²")
_MAX_DIGITS = 9  # without leading zeros: no GPU count comes near 10**9
#: the most bytes of JSON user options a spawn request may carry (options are
#: a profile slug, a pool id, a count and a few choices: well under 1 KiB)
MAX_OPTIONS_BYTES = 8 * 1024
# the value KubeSpawner's form gives a select whose free-text choice is picked
UNLISTED = "unlisted-choice"


# Why a request was refused, machine-readable: the ``reason`` label of
# ``gpuspawner_spawns_total{outcome="refused"}`` (``metrics.REFUSAL_REASONS``,
# docs/metrics.md).  A bounded set: the request's own text never becomes one.
UNKNOWN_POOL = "unknown_pool"  # the pool id is not one the profile offers
BAD_COUNT = "bad_count"  # the GPU count is not a whole number >= 1
TOO_MANY_GPUS = "too_many_gpus"  # more than the pool can give now (or the profile's max_gpus)
FORBIDDEN_OPTION = "forbidden_option"  # an option that may not be set, or a choice that is not offered
CAPACITY_UNKNOWN = "capacity_unknown"  # the capacity cache has not synced or is unhealthy (503)
CUDA_MISMATCH = "cuda_mismatch"  # the image's CUDA fits no node of the pool
NOT_ALLOWED = "not_allowed"  # a profile or pool this user cannot choose
UNTOLERATED_TAINT = "untolerated_taint"  # every node of the pool carries a taint no server tolerates
OTHER = "other"  # malformed requests (not a JSON object, a key or profile that is not a string)
#: the reasons that no capacity can change: a request refused for one of them is refused before
#: JupyterHub saves its options; the others are decided when the server starts
STATIC_REASONS = frozenset({BAD_COUNT, FORBIDDEN_OPTION, NOT_ALLOWED, OTHER})


class OptionError(ValueError):
    """A refused spawn request; ``status`` is the HTTP status to answer with,
    ``reason`` one of the constants above (for metrics and logs)."""

    default_reason = OTHER

    def __init__(self, message: str, status: int = 400, *, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason or self.default_reason


class CudaRefusal(OptionError):
    """The chosen image fits no node of the chosen pool (the CUDA check)."""

    default_reason = CUDA_MISMATCH


@dataclass(frozen=True)
class Selection:
    """What a valid request asks for."""

    profile: str | None  # slug of the chosen (or default) profile; None: no profiles
    offer: ProfileOffer | None = None  # set for a GPU profile
    pool: PoolOffer | None = None
    gpus: int | None = None
    # the image the request runs (cudacheck.ProfileImages key) and how it fits the pool
    image_key: str | None = None
    cuda: PoolFit | None = None


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: the most pools (or names) a message lists: the rest are counted ("and 409 more")
MAX_LISTED = 5


def printable(text: str) -> str:
    """``text`` with every character that is not printable (NUL, newlines, escapes, bidi
    controls) written as its Python escape, so a user's name cannot break a log line or a message."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def names(keys: Sequence[Any], limit: int = MAX_LISTED) -> str:
    """Names for a message, in backquotes: escaped (:func:`printable`), each cut to 40
    characters, at most ``limit`` of them and a count of the rest."""
    def one(key: Any) -> str:
        text = printable(key if isinstance(key, str) else repr(key))
        return f"`{text if len(text) <= 40 else text[:37] + '...'}`"

    shown = ", ".join(one(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def parse_gpu_count(value: Any) -> int:
    """A positive whole number of GPUs: a JSON integer (``2``) or a string of
    ASCII decimal digits (``"2"``, what the spawn form posts).

    Nothing else is read as a count, so what a client sent is what it gets:
    refused are ``null`` and ``""`` (say nothing to get one GPU), booleans
    (``true`` is an int in Python), every JSON number with a decimal point or
    an exponent (``1.0``, and ``0.99999999999999999``, which JSON parsers
    round to ``1.0``), strings with signs, spaces, tabs, dots, exponents or
    non-ASCII digits (``"\\t1"``, ``"2e0"``, ``"²"``), lists and objects.
    """
    n: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        digits = value.lstrip("0") or "0"
        if len(digits) > _MAX_DIGITS:
            raise OptionError(
                f"`{GPU_COUNT_OPTION}` {show(value)} is far more GPUs than any server can have",
                reason=BAD_COUNT,
            )
        n = int(digits)
    if n is None:
        raise OptionError(
            f"`{GPU_COUNT_OPTION}` must be a whole number of GPUs written as digits, such as 1 or \"2\", "
            f"not {show(value)}; leave `{GPU_COUNT_OPTION}` out to get 1",
            reason=BAD_COUNT,
        )
    if n < 1:
        raise OptionError(
            f"`{GPU_COUNT_OPTION}` must be at least 1, not {show(value)}; "
            "choose a profile without GPUs to run without one",
            reason=BAD_COUNT,
        )
    return n


def options_size(user_options: Any) -> int:
    """The size of ``user_options`` as JupyterHub stores it (JSON, UTF-8), in bytes.

    Values JSON cannot hold (the bytes of an uploaded file) count by their ``repr``."""
    return len(json.dumps(user_options, default=repr, ensure_ascii=False).encode("utf-8", "replace"))


def check_size(user_options: Any, limit: int = MAX_OPTIONS_BYTES) -> None:
    """Refuse user options larger than ``limit`` bytes of JSON, before anything else reads them."""
    try:
        size = options_size(user_options)
    except (TypeError, ValueError, RecursionError):
        raise OptionError("user options must be a JSON object of names and values", reason=OTHER) from None
    if size > limit:
        raise OptionError(
            f"user options may be at most {limit:,} bytes as JSON; these are {size:,} bytes. "
            'Send only the profile and its options, e.g. {"profile": "gpu", "gpu_pool": "<pool id>", "gpus": 1}',
            reason=OTHER,
        )


#: the most pools a refusal suggests: a few, by the names the spawn page shows
MAX_SUGGESTED = 3


def _pool_list(pools: Sequence[PoolOffer]) -> str:
    """Pools by the names users see (one entry per name: the same hardware in two node groups reads
    the same), each with how many GPUs it gives now; at most ``MAX_SUGGESTED`` and a count of the rest."""
    most: dict[str, int] = {}
    for p in sorted(pools, key=lambda p: -p.max_gpus):
        most.setdefault(printable(p.display_name), p.max_gpus)
    shown = [f"{name} (up to {n})" for name, n in most.items()]
    more = len(shown) - MAX_SUGGESTED
    text = ", ".join(shown[:MAX_SUGGESTED])
    return text + (f" and {more} more (the spawn page and GET /hub/api/gpus list them)" if more > 0 else "")


def _fits_image(p: PoolOffer, image_key: str | None) -> bool:
    fit = p.fit(image_key)
    return fit is None or not fit.refused


def _pools_hint(offer: ProfileOffer, image_key: str | None = None, besides: PoolOffer | None = None) -> str:
    """The pools that would work for this image now (room, and a driver that runs it), the most room
    first, a few of them by display name (a hub may offer hundreds)."""
    usable = [p for p in offer.usable if p is not besides and _fits_image(p, image_key)]
    if not usable:
        other = "other " if besides is not None else ""
        return f"no {other}pool of profile {offer.spec.slug!r} can give GPUs for this image right now"
    return "pools that would work for this image: " + _pool_list(usable)


def _profile_slugs(profile_list: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(str(p.get("slug")) for p in profile_list) or "(none)"


def _check_profile_option(slug: str, name: str, option: Mapping[str, Any], opts: Mapping[str, Any]) -> None:
    choice = opts.get(name)
    unlisted = opts.get(f"{name}--unlisted-choice")
    choices = option.get("choices") or {}
    spec = option.get("unlisted_choice") or {}
    if choice == UNLISTED and spec.get("enabled") and unlisted in (None, ""):
        raise OptionError(
            f"type a value for option `{name}` of profile {slug!r}, or choose one of: {', '.join(choices)}",
            reason=FORBIDDEN_OPTION,
        )
    if unlisted in (None, "") and choice not in (None, "") and (not isinstance(choice, str) or choice not in choices):
        raise OptionError(
            f"unknown choice {show(choice)} for option `{name}` of profile {slug!r}; "
            f"choose one of: {', '.join(choices) or '(none)'}",
            reason=FORBIDDEN_OPTION,
        )
    if unlisted not in (None, ""):
        if not spec.get("enabled"):
            raise OptionError(
                f"option `{name}` of profile {slug!r} takes no free-text value; choose one of: {', '.join(choices)}",
                reason=FORBIDDEN_OPTION,
            )
        regex = spec.get("validation_regex")
        if not isinstance(unlisted, str) or (regex and not re.fullmatch(regex, unlisted)):
            hint = spec.get("validation_message") or f"it must match {regex}"
            raise OptionError(
                f"value {show(unlisted)} for option `{name}` of profile {slug!r} is not allowed: {hint}",
                reason=FORBIDDEN_OPTION,
            )


def _check_keys(
    user_options: Mapping[str, Any],
    allowed: set[str],
    offer: ProfileOffer | None,
    slug: str | None,
    profile_list: Sequence[Mapping[str, Any]],
    offers: Mapping[str, ProfileOffer],
    trait_names: Iterable[str],
) -> None:
    """Refuse every key the chosen profile does not take, naming them: an option
    that would steer the pod if it were copied onto the spawner, a GPU option
    on a profile without GPUs, and any other name (a typo must not start a
    server other than the one asked for)."""
    traits = set(trait_names) | TRAIT_LIKE
    forbidden = sorted(k for k in user_options if k not in allowed and k in traits)
    if forbidden:
        raise OptionError(
            f"user options may not set {names(forbidden)}; choose a profile "
            f"instead (profiles: {_profile_slugs(profile_list)})",
            reason=FORBIDDEN_OPTION,
        )
    if offer is None:
        gpu_keys = sorted(k for k in user_options if k in GPU_OPTIONS and k not in allowed)
        if gpu_keys:
            gpu_slugs = ", ".join(offers) or "(none on this hub)"
            where = f"profile {slug!r} has no GPUs" if slug else "this hub has no profiles"
            raise OptionError(
                f"{where}, so {names(gpu_keys)} cannot be set; for GPUs choose a GPU profile: {gpu_slugs}",
                reason=FORBIDDEN_OPTION,
            )
    else:
        allowed = allowed | set(GPU_OPTIONS)
    extra = sorted(k for k in user_options if k not in allowed)
    if extra:
        where = f"for profile {slug!r}" if slug else "on this hub, which has no profiles"
        raise OptionError(
            f"unknown option(s) {names(extra)} {where}; it accepts: {', '.join(sorted(allowed))}",
            reason=FORBIDDEN_OPTION,
        )


def validate_user_options(
    user_options: Any,
    profile_list: Sequence[Mapping[str, Any]],
    offers: Mapping[str, ProfileOffer],
    *,
    trait_names: Iterable[str] = (),
    admin_keys: Iterable[str] = (),
) -> Selection:
    """Check ``user_options`` against the profiles offered now.

    ``profile_list`` is KubeSpawner's initialized list (slugs and defaults
    filled in); ``offers`` the GPU profiles' offers by slug;
    ``trait_names`` the spawner's trait names, all of which are refused as
    option keys unless the chosen profile declares an option of that name;
    ``admin_keys`` keys the admin lets users set for any profile (the keys of
    JupyterHub's ``Spawner.apply_user_options`` when it is a dict).
    """
    if user_options is None:
        user_options = {}
    if not isinstance(user_options, Mapping):
        raise OptionError(
            f"user options must be a JSON object like {{\"profile\": \"gpu\"}}, not {show(user_options)}", reason=OTHER
        )
    check_size(user_options)
    bad_keys = [k for k in user_options if not isinstance(k, str)]
    if bad_keys:
        raise OptionError(f"user option names must be strings, not {show(bad_keys[0])}", reason=OTHER)

    slug = user_options.get("profile")
    if slug is not None and not isinstance(slug, str):
        raise OptionError(
            f"`profile` must be a profile slug string, not {show(slug)}; profiles: {_profile_slugs(profile_list)}",
            reason=OTHER,
        )
    if slug:
        profile = next((p for p in profile_list if p.get("slug") == slug), None)
        if profile is None:
            raise OptionError(
                f"unknown profile {show(slug)}; profiles you can use: {_profile_slugs(profile_list)}",
                reason=NOT_ALLOWED,
            )
    else:
        profile = next((p for p in profile_list if p.get("default")), None)
        if profile is None and profile_list:
            profile = profile_list[0]
    slug = profile.get("slug") if profile is not None else None
    offer = offers.get(slug) if slug is not None else None

    options: Mapping[str, Any] = (profile.get("profile_options") or {}) if profile else {}
    allowed = {"profile", *options, *admin_keys}
    allowed |= {f"{n}--unlisted-choice" for n, o in options.items() if (o.get("unlisted_choice") or {}).get("enabled")}
    _check_keys(user_options, allowed, offer, slug, profile_list, offers, trait_names)
    for name, option in options.items():
        if offer is not None and name in GPU_OPTIONS:
            continue
        _check_profile_option(slug, name, option, user_options)

    if offer is None:
        return Selection(profile=slug)
    return _select_gpus(offer, user_options, offers)


def _select_gpus(offer: ProfileOffer, user_options: Mapping[str, Any], offers: Mapping[str, ProfileOffer]) -> Selection:
    slug = offer.spec.slug
    gpus = parse_gpu_count(user_options[GPU_COUNT_OPTION]) if GPU_COUNT_OPTION in user_options else 1
    pool_id = user_options.get(GPU_POOL_OPTION)
    image_key = offer.spec.images.key_for(user_options)
    if GPU_POOL_OPTION in user_options and (not isinstance(pool_id, str) or not pool_id):
        raise OptionError(
            f"`{GPU_POOL_OPTION}` must be a pool id string, not {show(pool_id)}; leave it out to get "
            f"the pool with the most room, or choose one ({_pools_hint(offer, image_key)})",
            reason=UNKNOWN_POOL,
        )

    if offer.problem and not offer.pools:
        raise OptionError(
            f"{offer.problem}. GPU servers cannot be started until the hub can see free GPUs; "
            "try again in a minute, or choose a profile without GPUs",
            status=503,
            reason=CAPACITY_UNKNOWN,
        )

    # count only the nodes the chosen image's driver fits: the pod is steered off
    # the others (profiles.PoolOffer.for_image), so a count only they could hold would wait Pending
    offer = offer.for_image(image_key)

    if not pool_id:
        # the first pool with room whose drivers fit the image best; if none
        # has room, the biggest, so the message below says how many one may ask for
        chosen = offer.preferred_pool(gpus, image_key)
        chosen = chosen or max(offer.usable, key=lambda p: p.max_gpus, default=None)
        if chosen is None:
            raise OptionError(
                f"no GPUs can be had in profile {slug!r} right now; try again later or choose another profile",
                reason=TOO_MANY_GPUS,
            )
    else:
        chosen = offer.pool(pool_id)
        if chosen is None:
            others = [s for s, o in offers.items() if s != slug and o.pool(pool_id)]
            if others:
                raise OptionError(
                    f"pool {show(pool_id)} is not offered by profile {slug!r} (it is in profile "
                    f"{others[0]!r}); {_pools_hint(offer, image_key)}",
                    reason=NOT_ALLOWED,
                )
            raise OptionError(f"unknown pool {show(pool_id)}; {_pools_hint(offer, image_key)}", reason=UNKNOWN_POOL)
        if not chosen.available:
            raise OptionError(
                f"{chosen.display_name} cannot give any GPU now: {chosen.reason}; "
                f"choose another pool or try again later ({_pools_hint(offer, image_key, chosen)})",
                reason=UNTOLERATED_TAINT if chosen.taint_refusal else TOO_MANY_GPUS,
            )
    if gpus > chosen.max_gpus:
        where = " on the nodes whose driver fits this image" if chosen.narrowed else ""
        raise OptionError(
            f"choose between 1 and {chosen.max_gpus} GPUs in {chosen.display_name}{where} "
            f"(asked for {show(gpus)}){'; ' + chosen.limit_note if chosen.limit_note else ''}; "
            f"{_pools_hint(offer, image_key, chosen)}",
            reason=TOO_MANY_GPUS,
        )
    fit = chosen.fit(image_key)
    if fit is not None and fit.refused:
        others = [p for p in offer.usable if p is not chosen and _fits_image(p, image_key)]
        hint = f" GPU pools whose drivers fit this image: {_pool_list(others)}." if others else ""
        raise CudaRefusal(fit.refusal(chosen.display_name) + hint)
    return Selection(profile=slug, offer=offer, pool=chosen, gpus=gpus, image_key=image_key, cuda=fit)
