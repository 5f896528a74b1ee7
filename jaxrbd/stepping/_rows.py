"""The step's complementarity problem, assembled from the contact record."""

from ..cones import PlanarCone, PolyhedralCone


def default_cone(system, contacts):
    """The system's friction cone: `system.friction`, or the default for its tangents."""
    if system.friction is not None:
        return system.friction
    return PlanarCone() if contacts.tangents == 1 else PolyhedralCone(system.directions)


def step_problem(cone, contacts, M, J, b, dt=None, **kwargs):
    """The cone's problem (`cone.build`) from the record's rows, the mass matrix M and the joint rows J (ng, nv).

    dt: the step, which bounds a joint's dry friction impulse by its force times dt (`Contacts.dry`); None
    (an impact phase, which takes no time) bounds it by 0.
    kwargs: `bn` (normal-row offsets), `active` (the contacts in the problem) and `compliance` (the normal rows'
    relative compliance, a polyhedral cone's only: passed on where it is not 0).
    """
    T = contacts.friction_rows(cone.dim)
    dry = None
    if contacts.dry is not None:
        dry = (contacts.dry, contacts.dry_friction * (0.0 if dt is None else dt))
    if not kwargs.get("compliance"):  # rigid rows, which every cone builds
        kwargs.pop("compliance", None)
    return cone.build(M, contacts.J_n.T, T, contacts.mu, b, J=J.T, frictional=contacts.frictional, dry=dry, **kwargs)
