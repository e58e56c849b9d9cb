"""Typed failures of a model call. Callers catch ModelError; the subclasses say what to do."""


class ModelError(Exception):
    """Any failure talking to a model."""


class ModelConfigError(ModelError):
    """The model cannot be used as configured (no key, unknown provider). Fix the settings."""


class ModelAuthError(ModelError):
    """The provider refused the credentials. The message names the variable to check."""


class ModelUnavailable(ModelError):
    """Rate limits, server errors or timeouts outlasted the retries. Worth trying again later."""


class ModelRequestError(ModelError):
    """The provider refused the request itself (400, 404, 422): retrying will not help."""


class ModelOutputError(ModelError):
    """A structured (JSON) answer stayed invalid after one repair attempt."""

    def __init__(self, message: str, *, raw: str = ""):
        super().__init__(message)
        self.raw = raw
