"""`StatusCode`: an integer enumeration whose members carry the sentence they stand for.

Both status enumerations (`jaxrbd.Status` of a complementarity solve, `jaxrbd.StepStatus`
of a step) are written with it: each member is `NAME = code, "what it means"`.
"""

import enum


class StatusCode(enum.IntEnum):
    """An `IntEnum` whose members are `(code, message)`: compare with ints (arrays under `jit`), read the message."""

    def __new__(cls, code, message):
        member = int.__new__(cls, code)
        member._value_ = code
        member.text = message
        return member

    @classmethod
    def message(cls, code):
        """The sentence for a status code (an int or a scalar array)."""
        return cls(int(code)).text
