"""The exception and warning types the package raises for bad input or configuration."""


class MiaFastError(ValueError):
    """A problem with the user's input or setup, with a message that says what to do."""


class MiaFastWarning(UserWarning):
    """Something in the user's input was changed or is doubtful, and the run goes on (e.g. a text cleaned of lone
    surrogates); the CLI prints each as one line."""
