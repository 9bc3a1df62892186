"""The servekit error tree (core): every error carries its exit code and a fix.

The library raises these and never prints; only the CLI turns them into one line
of text and an exit code (1 error, 2 usage, 3 checks failed).
"""

from __future__ import annotations


class ServekitError(Exception):
    """Base of every error servekit raises on purpose.

    Attributes:
        exit_code: process exit code the CLI uses for this error.
    """

    exit_code: int = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        if self.fix:
            return f"{self.message}; {self.fix}"
        return self.message


class UsageError(ServekitError):
    """A command was called with options that cannot work together or are malformed."""

    exit_code = 2


class ConfigError(ServekitError):
    """A profile, GPU catalog entry or model directory is invalid."""


class ProfileNotFound(ConfigError):
    """A profile name matched no built-in or user profile."""


class ModelDirError(ConfigError):
    """A local model directory is incomplete or unreadable."""


class PlanError(ServekitError):
    """The memory plan cannot satisfy the requested configuration."""


class StartupLogError(ServekitError):
    """A vLLM startup log could not be read or holds none of the expected lines."""


class EndpointError(ServekitError):
    """A server did not answer as an OpenAI-compatible vLLM server should."""


class LaunchError(ServekitError):
    """An engine could not be started, did not become ready, or could not be stopped."""


class SimulationError(ServekitError):
    """The built-in simulator was given an impossible configuration."""


class Interrupted(ServekitError):
    """The user interrupted a run (Ctrl-C); what finished was kept."""

    exit_code = 130


class Terminated(Interrupted):
    """A run was stopped by SIGTERM (docker stop, Kubernetes, timeout); what finished was
    kept. Exit code 143 (128 + SIGTERM), as a shell reports a process SIGTERM ended."""

    exit_code = 143


class ChecksFailed(ServekitError):
    """One or more checks ran and failed.

    Attributes:
        reported: the command's own output already shows what failed (a doctor or
            status table), so the CLI adds no error line, only the exit code.
    """

    exit_code = 3

    def __init__(self, message: str, *, fix: str | None = None, reported: bool = False) -> None:
        super().__init__(message, fix=fix)
        self.reported = reported
