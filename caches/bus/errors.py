"""Bus errors an operator sees."""


class BusUnavailable(Exception):
    """Redis cannot be reached: an operator command was not delivered to any worker."""
