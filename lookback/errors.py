"""The errors a user can fix. Each is one line that names what is wrong and where (a config
lists one line per problem), and the CLI prints it without a traceback."""


class ConfigError(ValueError):
    """A config problem; the message lists every problem found, one per line."""


class DataError(ValueError):
    """A bad corpus; the message names the file (and the line where there is one)."""


class CheckpointError(ValueError):
    """A checkpoint that is missing, truncated, corrupt or not ours."""


class NonFiniteLoss(ValueError):
    """A NaN or infinite loss with train.nonfinite: stop."""


class RunDirError(ValueError):
    """The run directory cannot be written, or lacks the room for its checkpoints."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name if it has none)."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]
