"""The exceptions a CLI turns into one line on stderr, and their exit statuses (kept here, in one place)."""

USER_ERROR_STATUS = 2  # a mistake the user can fix
DIVERGED_STATUS = 3  # training diverged (acgan.train)
DISK_FULL_STATUS = 4  # a write failed: no space left, a file-size limit or a disk quota
LOST_WORKER_STATUS = 5  # a multi_worker run lost one of its processes (acgan.train)


def one_line(text, limit=300):
    """`text` (an exception or a string) with its whitespace collapsed onto one line, at most `limit`
    characters ("..." ending a cut one): how another library's error is quoted in a message of ours."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UserError(Exception):
    """A problem the user can fix (bad flag, missing or corrupt file); its message is one line."""


class DiskFull(Exception):
    """A write failed for lack of space (or a file-size limit, or a quota). Its message is one line
    naming what could not be written and how much space is free; CLIs exit with DISK_FULL_STATUS."""


class LostWorker(Exception):
    """A multi_worker run lost a peer process. Its message is one line: what was lost, the step, the last
    intact checkpoint and how to resume; CLIs exit with LOST_WORKER_STATUS without waiting for the peer."""
