"""Colouring of contacts for block Gauss-Seidel: no two contacts of a colour share a moving body."""

import jax
import jax.numpy as jnp

# Colours available to the traced colouring of a broad phase's contact slots; a
# body touching more contacts than this would make two of them share a colour
# (the step's residual would then show it).
MAX_COLORS = 64


def color_slots(a, b, nbodies):
    """(nc,) int32 greedy colours of contacts whose bodies a, b (nc,) are traced.

    The same greedy rule as `color_contacts`, in a `lax.scan` over the contacts
    with a table of the colours each body already has (the world, index nbodies,
    never conflicts).
    """
    ncolors = min(a.shape[0], MAX_COLORS)

    def add(used, ab):
        i, j = ab
        color = jnp.argmin(used[i] | used[j])
        mark = jnp.arange(ncolors) == color
        used = used.at[i].set(used[i] | (mark & (i < nbodies)))
        used = used.at[j].set(used[j] | (mark & (j < nbodies)))
        return used, color.astype(jnp.int32)

    used = jnp.zeros((nbodies + 1, ncolors), bool)
    return jax.lax.scan(add, used, (a, b))[1]


def color_contacts(a, b, nbodies):
    """Greedy colouring of the contacts: two contacts sharing a moving body get different colours.

    Args:
        a, b: (nc,) body indices of each contact (nbodies: the world, which never conflicts).

    Returns:
        A tuple of index tuples, one per colour, covering every contact once.
    """
    used = [set() for _ in range(nbodies)]
    colors = []
    for c, (i, j) in enumerate(zip(a, b)):
        taken = set().union(*(used[k] for k in (i, j) if k < nbodies))
        color = next(k for k in range(len(colors) + 1) if k not in taken)
        if color == len(colors):
            colors.append([])
        colors[color].append(c)
        for k in (i, j):
            if k < nbodies:
                used[k].add(color)
    return tuple(tuple(c) for c in colors)
