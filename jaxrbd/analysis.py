"""Reading a trajectory: contact phases and event times, for comparison with the papers."""

from typing import NamedTuple

import jax
import numpy as np

from ._rotation import rotation_angle

CONTACT = 1e-9  # a normal impulse above this counts as contact
STICK = 1e-6  # a slip speed below this counts as sticking
REST = 1e-3  # every |v| below this counts as rest (reference problem P1)


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


def first_contact(traj, contacts):
    """Start time of the first step with a normal impulse on any of the given contact indices (nan if none)."""
    hit = (np.asarray(traj.impulses.normal)[:, contacts] > CONTACT).reshape(len(traj.t) - 1, -1).any(1)
    return float(np.asarray(traj.t)[np.argmax(hit)]) if hit.any() else float("nan")


class ConvergenceRow(NamedTuple):
    """One row of 003 Table 1 for step size h, against a reference trajectory.

    Attributes:
        h: step size.
        velocity_error: int_0^T ||v_h(t) - v_ref(t)||_inf dt, velocities piecewise constant.
        position_error: sup_l ||x_h - x_ref||_inf over the centres of mass (positions only).
        orientation_error: sup_l of the rotation angle between the two orientations (rad).
        variation: sum_l ||v_{l+1} - v_l||_inf (the paper's V(v^h)).
    """

    h: float
    velocity_error: float
    position_error: float
    orientation_error: float
    variation: float


def convergence_row(bodies, traj, reference):
    """003 Table 1 measures of `traj` against `reference`, a rollout with a step that divides traj's.

    Both must cover the same interval [0, T] from the same initial state. With
    velocities piecewise constant (v_{l+1} on (t_l, t_{l+1}]) the integral is exact
    on the reference grid; positions and orientations are compared at traj's steps.
    """
    t, t_ref = np.asarray(traj.t), np.asarray(reference.t)
    h, h_ref = t[1] - t[0], t_ref[1] - t_ref[0]
    ratio = int(round(h / h_ref))
    if abs(ratio * h_ref - h) > 1e-9 * h or abs(t[-1] - t_ref[-1]) > 1e-9:
        raise ValueError(f"the reference step {h_ref} must divide {h} and both must end at the same time")
    v, v_ref = np.asarray(traj.v), np.asarray(reference.v)
    j = np.arange(len(v_ref) - 1)
    velocity_error = h_ref * np.abs(v[j // ratio + 1] - v_ref[1:]).max(1).sum()
    x, x_ref = np.asarray(bodies.positions(traj.q)), np.asarray(bodies.positions(reference.q))[::ratio]
    quat, quat_ref = bodies.orientations(traj.q), bodies.orientations(reference.q)[::ratio]
    return ConvergenceRow(
        h=float(h),
        velocity_error=float(velocity_error),
        position_error=float(np.abs(x - x_ref).max()),
        orientation_error=float(np.asarray(rotation_angle(quat, quat_ref)).max()),
        variation=float(np.abs(np.diff(v, axis=0)).max(1).sum()),
    )
