"""Exceptions for mistakes a user can fix (bad config, bad files, bad data).

Scripts catch `UserError`, print `error: <message>` and exit with status 2, without a traceback.
"""


class UserError(Exception):
    """Base class of every error caused by user input rather than by a bug."""


class ConfigError(UserError):
    """A config key is unknown, has the wrong type or an impossible value."""


class DataError(UserError):
    """A data file is missing, unreadable or inconsistent."""


class CheckpointError(UserError):
    """A checkpoint file is missing, truncated, foreign or unsafe."""


class ShapeError(UserError):
    """An input tensor has a shape the model cannot take."""


class NonFiniteError(UserError):
    """A tensor holds NaN or Inf where finite values are required."""
