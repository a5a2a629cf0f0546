"""The policies a run compares: how the engine chooses victims and places pods, and the two
knobs that decide how much a preemption costs (checkpoint interval, minimum run time).

A policy is written `preset` or `preset+key=value+key=value`, e.g. `ours`, `kueue`,
`ours+ckpt=600`, `worst-fit+min_run=0+name=wf-eager`, `fgd+workload_hours=168`. The victim
orders and placements are
the engine's own (`Config.victim_order`, `Config.placement`); the simulator only picks them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast, get_args

from apps.scheduler.engine import Config, PlacementRule, VictimOrder


class PolicyError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    victim_order: VictimOrder = "least_lost_work"
    placement: PlacementRule = "best_fit"
    checkpoint_interval: float | None = None  # seconds; None: the run's default
    min_run_seconds: float | None = None  # None: the run's default
    workload_hours: float | None = None  # FGD's window of arrivals; None: the run's default

    def config(self, *, seed: int, min_run_seconds: float) -> Config:
        """The engine's configuration for this policy."""
        own = self.min_run_seconds
        return Config(
            min_run_seconds=min_run_seconds if own is None else own,
            victim_order=self.victim_order,
            placement=self.placement,
            seed=seed,
        )

    def describe(self) -> dict[str, object]:
        return {
            "victim_order": self.victim_order,
            "placement": self.placement,
            "checkpoint_interval": self.checkpoint_interval,
            "min_run_seconds": self.min_run_seconds,
            "workload_hours": self.workload_hours,
        }


PRESETS = {
    "ours": Policy("ours"),
    "kueue": Policy("kueue", victim_order="kueue"),
    "random-victims": Policy("random-victims", victim_order="random"),
    "worst-fit": Policy("worst-fit", placement="worst_fit"),
    "random-fit": Policy("random-fit", placement="random"),
    "fgd": Policy("fgd", placement="fgd"),
}
DEFAULTS = {
    "replay": "ours,kueue,random-victims",
    "fill": "ours,fgd,worst-fit,random-fit",
}


def parse_policies(text: str) -> list[Policy]:
    """A comma-separated list of policies; names must differ."""
    policies = [parse_policy(part.strip()) for part in text.split(",") if part.strip()]
    if not policies:
        raise PolicyError("no policy given")
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise PolicyError(f"policy names repeat: {', '.join(names)} (add +name=…)")
    return policies


def check_policies(policies: Sequence[Policy], mode: str) -> None:
    """Refuse what a mode cannot run: a workload window in fill mode, whose arrivals have no
    times to count hours by."""
    for policy in policies:
        if policy.workload_hours and mode != "replay":
            raise PolicyError(
                f"{policy.name}: workload_hours is for replay mode: fill mode's arrivals have "
                "no times"
            )


def parse_policy(text: str) -> Policy:
    preset, *options = text.split("+")
    if preset not in PRESETS:
        raise PolicyError(f"unknown policy {preset!r} (presets: {', '.join(PRESETS)})")
    policy = PRESETS[preset]
    named = False
    for option in options:
        key, sep, value = option.partition("=")
        if not sep:
            raise PolicyError(f"{text}: expected key=value, got {option!r}")
        if key == "name":
            policy, named = replace(policy, name=value), True
        elif key == "victims":
            order = cast(VictimOrder, _choice(value, VictimOrder, text))
            policy = replace(policy, victim_order=order)
        elif key == "placement":
            rule = cast(PlacementRule, _choice(value, PlacementRule, text))
            policy = replace(policy, placement=rule)
        elif key in ("ckpt", "min_run", "workload_hours"):
            number = _amount(value, text, "hours" if key == "workload_hours" else "seconds")
            if key == "ckpt":
                policy = replace(policy, checkpoint_interval=number)
            elif key == "min_run":
                policy = replace(policy, min_run_seconds=number)
            else:
                policy = replace(policy, workload_hours=number)
        else:
            raise PolicyError(
                f"{text}: unknown key {key!r} "
                "(name, victims, placement, ckpt, min_run, workload_hours)"
            )
    return policy if named or not options else replace(policy, name=text)


def _choice(value: str, kind: object, text: str) -> str:
    allowed = get_args(kind)
    value = value.replace("-", "_")
    if value not in allowed:
        raise PolicyError(f"{text}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _amount(value: str, text: str, unit: str) -> float:
    try:
        amount = float(value)
    except ValueError:
        raise PolicyError(f"{text}: {value!r} is not a number of {unit}") from None
    if not (math.isfinite(amount) and amount >= 0):  # inf is no JSON: a summary holds it
        raise PolicyError(f"{text}: {unit} must be a finite number ≥ 0")
    return amount
