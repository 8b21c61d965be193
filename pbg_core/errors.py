"""Engine-level exception types. Messages name the bad value and what is allowed."""

from __future__ import annotations


class PbgError(Exception):
    """Base class of every error raised on purpose by pbg_core."""


class ConfigError(PbgError, ValueError):
    """A config is invalid. Carries every problem found, not just the first.

    One problem reads as one line (``config in x.json: lr: ...``); several as a header
    line and one line per problem.

    Attributes:
        problems: One human-readable line per problem, each naming the field
            (dotted path), the bad value and what is allowed.
        source: The file or URL the config came from, if known.
    """

    # What the problems are about, in the message: a subclass names its kind of file.
    subject = "config"

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        count = len(self.problems)
        if count == 1:  # one line: where, then the problem (field, bad value, what is allowed)
            super().__init__(f"{self.subject}{where}: {self.problems[0]}")
            return
        header = f"{count} problems with the {self.subject}{where}:"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))

    def __reduce__(self) -> tuple[type, tuple[list[str], str | None]]:
        # Errors cross process and task boundaries: rebuild from the problems, not the message.
        return (type(self), (self.problems, self.source))


class SearchSpaceError(ConfigError):
    """A tuning study's search-space file is invalid, or does not fit the config it tunes.

    Reads as ``search space in space.yaml: lr: ...``, or a header line and one line per
    problem, each starting with the field path (:mod:`pbg_core.config.space_checks`).
    """

    subject = "search space"


class UsageError(PbgError, ValueError):
    """A command's option or argument is invalid (not the config): names the option, value and what is allowed."""


class UnknownNameError(PbgError, ValueError):
    """A registry lookup failed; the message lists the known names."""


class ShapeError(PbgError, ValueError):
    """A tensor or stored dataset has the wrong shape."""


class TrainingDivergedError(PbgError, RuntimeError):
    """Loss became NaN or infinite. Names the bucket and the last committed version."""


class WorkerDiedError(PbgError, RuntimeError):
    """A HOGWILD worker process exited unexpectedly."""


class SharedMemoryFull(PbgError, MemoryError):
    """A shared-memory allocation failed: names the bytes wanted and where shared memory lives (``/dev/shm``)."""


class ClusterError(PbgError, RuntimeError):
    """The Dask cluster of a distributed run cannot train it: names the address or worker and the fix."""

    # Never retried as a storage fault, whatever it was raised from (read by tasks/_policies.py):
    # a lost worker or scheduler has its own handling, with its own waits.
    transient = False


class MachineLost(ClusterError):
    """A machine (Dask worker) left the cluster while it trained a bucket: the bucket goes to another."""


class BucketAbandoned(ClusterError):
    """A distributed run closed (its end, Ctrl-C, a failure) while a machine trained a bucket.

    The bucket is not recorded: a rerun trains it again from its partitions' last recorded saves.
    """
