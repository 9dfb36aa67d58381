"""The one exception type for mistakes a user can make; CLIs print it as one line and exit 2."""


class UserError(Exception):
    """A problem the user can fix (bad flag, missing or corrupt file); its message is one line."""
