"""The step's complementarity problem, assembled from the contact record."""

from ..cones import PlanarCone, PolyhedralCone


def default_cone(system, contacts):
    """The system's friction cone: `system.friction`, or the default for its tangents."""
    if system.friction is not None:
        return system.friction
    return PlanarCone() if contacts.tangents == 1 else PolyhedralCone(system.directions)


def step_problem(cone, contacts, M, J, b, **kwargs):
    """The cone's problem (`cone.build`) from the record's rows, the mass matrix M and the joint rows J (ng, nv).

    kwargs: `bn` (normal-row offsets) and `active` (the contacts in the problem).
    """
    T = contacts.friction_rows(cone.dim)
    return cone.build(M, contacts.J_n.T, T, contacts.mu, b, J=J.T, frictional=contacts.frictional, **kwargs)
