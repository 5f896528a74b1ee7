"""Reading a trajectory: contact phases and event times, for comparison with the papers."""

from typing import NamedTuple

import jax
import numpy as np

CONTACT = 1e-9  # a normal impulse above this counts as contact
STICK = 1e-6  # a slip speed below this counts as sticking
REST = 1e-3  # every |v| below this counts as rest (BENCHMARKS.md P1)


class RodEvents(NamedTuple):
    """Event times of the falling rod (each the start time of the step where it happens).

    Attributes:
        first_impact: first step with a normal impulse.
        full_contact: first step with a normal impulse at both ends ("slap-down").
        rest: first step after which every |v| stays below 1e-3.
        phases: [(label, t_start, t_end)], consecutive steps of the same contact mode merged;
            slip directions are those of the contact end along +x ("left" is -x).
    """

    first_impact: float
    full_contact: float
    rest: float
    phases: list


def _slip_label(slip):
    if abs(slip) < STICK:
        return "stick"
    return "slide right" if slip > 0 else "slide left"


def contact_modes(system, traj):
    """(steps, nc) contact flags and (steps, nc) slip speed after each step along the first tangent."""
    in_contact = np.asarray(traj.impulses.normal) > CONTACT
    T = jax.vmap(lambda q: system.tangents(q, system.params))(traj.q[:-1])  # (steps, nc, m, nv)
    slip = np.einsum("scv,sv->sc", np.asarray(T[:, :, 0, :]), np.asarray(traj.v[1:]))
    return in_contact, slip


def rod_events(system, traj):
    """Event times and the sequence of contact phases of a falling-rod trajectory (003 §4.1)."""
    in_contact, slip = contact_modes(system, traj)
    t = np.asarray(traj.t)
    v = np.asarray(traj.v)
    any_contact, both = in_contact.any(1), in_contact.all(1)
    first = int(np.argmax(any_contact)) if any_contact.any() else None
    full = int(np.argmax(both)) if both.any() else None
    moving = np.abs(v[1:]).max(1) >= REST
    rest = int(np.where(moving)[0].max()) + 1 if moving.any() else 0
    labels = []
    for i in range(len(any_contact)):
        if full is not None and i >= rest and i >= full:
            label = "rest"
        elif both[i]:
            label = "full contact: " + _slip_label(slip[i].mean())
        elif any_contact[i]:
            end = int(np.argmax(in_contact[i]))
            label = ("impact: " if i == first else "") + _slip_label(slip[i, end])
        else:
            label = "flight"
        labels.append(label)
    phases = []
    for i, label in enumerate(labels):
        if phases and phases[-1][0] == label:
            phases[-1] = (label, phases[-1][1], float(t[i + 1]))
        else:
            phases.append((label, float(t[i]), float(t[i + 1])))
    nan = float("nan")
    return RodEvents(
        first_impact=float(t[first]) if first is not None else nan,
        full_contact=float(t[full]) if full is not None else nan,
        rest=float(t[rest]) if rest < len(t) else nan,
        phases=phases,
    )
