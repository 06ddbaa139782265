"""The one exception type the package raises for bad input or configuration."""


class MiaFastError(ValueError):
    """A problem with the user's input or setup, with a message that says what to do."""
