"""Exceptions for mistakes a user can fix (bad config, bad files, bad data).

Every script catches :class:`UserError`, prints ``error: <message>`` to stderr and
exits with status 2, without a traceback. Programming errors stay ordinary
exceptions (``ValueError``, ``RuntimeError``...) so that they keep their traceback.
"""


class UserError(Exception):
    """Base class of every error caused by user input."""


class ConfigError(UserError):
    """A config file or ``--set`` override is invalid (unknown key, wrong type, bad value)."""


class DataError(UserError):
    """A data file or data item is missing, unreadable or invalid."""


class CheckpointError(UserError):
    """A checkpoint file is missing, truncated, foreign or incompatible."""


class TrainingError(UserError):
    """Training cannot go on (e.g. the loss keeps being NaN/Inf); the message says what to change."""
