"""Exceptions.

`UserError` and its subclasses are mistakes a user can fix (bad config, bad files, bad data, an input the model cannot
take). Scripts catch them, print `error: <message>` and exit with status 2, without a traceback.

`ContractError` is a broken internal contract (a tensor with the wrong shape between two of our own functions): a
bug in the code, not bad input. It is not a `UserError`, so it surfaces with its full traceback.
"""


class UserError(Exception):
    """Base class of every error caused by user input rather than by a bug."""


class ConfigError(UserError):
    """A config key is unknown, has the wrong type or an impossible value."""


class DataError(UserError):
    """A data file is missing, unreadable or inconsistent."""


class CheckpointError(UserError):
    """A checkpoint file is missing, truncated, foreign or unsafe."""


class MissingDependencyError(UserError):
    """An optional dependency is not installed (e.g. the [onnx] extra for export and the onnx backend)."""


class ShapeError(UserError):
    """An input given to the model has a shape the model cannot take."""


class NonFiniteError(UserError):
    """A tensor holds NaN or Inf where finite values are required (diverged training, corrupt input)."""


class ContractError(AssertionError):
    """An internal shape contract is broken: a bug, reported with its traceback (never as a user error)."""
