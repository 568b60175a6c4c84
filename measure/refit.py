"""Recompute fits from the raw samples a profile already holds, without a GPU:

    python -m perfmodel.measure.refit PROFILE.json [--out NEW.json]

Used when a fitting rule changes (e.g. per-op elementwise laws, attention KV passes): the measurements stay, the
laws are re-derived, and the profile's provenance note records the refit."""

from __future__ import annotations

import argparse
import datetime as _dt

from perfmodel.profile import load_profile, save_profile

from .attention import fit_attention
from .elementwise import fit_elementwise
from .moe import fit_moe
from .prefill import fit_prefill


def _sm_count(profile) -> int | None:
    """The profile GPU's SM count, from its hwspecs entry (None if it has none)."""
    from perfmodel.specs import registry

    try:
        return int(registry.load_gpu(profile.provenance.gpu_spec).sm_count.value) if profile.provenance.gpu_spec else None
    except registry.SpecError:
        return None


def refit(profile):
    src = profile.fits.get("elementwise")
    source = src.source if src else f"measured: {profile.provenance.timestamp}"
    b = profile.benches.get("elementwise")
    if b is not None and b.status == "ok" and b.samples:
        profile.fits.update(fit_elementwise(b.samples, profile.ceilings, source))
    sms = _sm_count(profile)
    for bench, fit in (("attention", lambda *a: fit_attention(*a, sms)), ("moe", fit_moe), ("prefill", fit_prefill)):
        a = profile.benches.get(bench)
        if a is not None and a.status == "ok" and a.samples:
            profile.fits.update(fit(a.samples, profile.ceilings, source))
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    note = profile.provenance.note
    profile.provenance.note = (note.rstrip("; ") + "; " if note else "") + f"fits recomputed from stored samples at {stamp} (perfmodel.measure.refit)"
    return profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--out")
    a = ap.parse_args()
    p = refit(load_profile(a.profile))
    save_profile(p, a.out or a.profile)
    print(f"refit written to {a.out or a.profile}: {', '.join(sorted(p.fits))}")


if __name__ == "__main__":
    main()
