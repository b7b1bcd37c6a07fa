"""What the engine tells a strategy, as typed objects (docs/ipc.md, "Events").

Every event about an order carries `id` (the order), `at_ns` (the engine's monotonic time
when it wrote it) and `position` (its place in the event ring). Reasons come by name and by
code. Two events are the channel's own, not the engine's: `EngineRestarted` (the epoch
changed: another engine process, with its journal restored) and `EngineLost` (the engine
stopped or died; nothing reads commands until one is live again).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """Base of every event about an order."""

    id: int
    at_ns: int
    position: int


@dataclass(frozen=True)
class Accepted(Event):
    """The venue acknowledged the order."""


@dataclass(frozen=True)
class PartiallyFilled(Event):
    """A fill of `qty` at `price`; `leaves` stay open."""

    qty: int
    leaves: int
    price: int


@dataclass(frozen=True)
class Filled(Event):
    """The last fill, of `qty` at `price`: the order is done."""

    qty: int
    price: int


@dataclass(frozen=True)
class Canceled(Event):
    """The order is canceled (by a cancel, a mass cancel, an IOC's rest, or the venue)."""


@dataclass(frozen=True)
class Replaced(Event):
    """The order was replaced by `new_id`."""

    new_id: int


@dataclass(frozen=True)
class Rejected(Event):
    """The venue refused the order: `reason` by name ("venue throttle", ...), `code`, and the
    venue's own code when the reason is "other"."""

    reason: str
    code: int
    venue_code: int


@dataclass(frozen=True)
class CancelRejected(Event):
    """A cancel or replace was refused ("too late", "unknown order", ...)."""

    reason: str
    code: int


@dataclass(frozen=True)
class Unknown(Event):
    """No answer in time: keel is asking the venue. Never resend; treat the order as live."""


@dataclass(frozen=True)
class Shed(Event):
    """Overload shedding refused the new order."""


@dataclass(frozen=True)
class Throttled(Event):
    """No rate budget before the acquire deadline."""


@dataclass(frozen=True)
class BreakerOpen(Event):
    """The venue's breaker is open: retry no sooner than `retry_after_ns`."""

    retry_after_ns: int


@dataclass(frozen=True)
class Refused(Event):
    """keel refused the command before the venue: `reason` by name, `code`, and `advice`
    ("pause": send a new order again after a pause; "never": do not retry it)."""

    reason: str
    code: int
    advice: str


@dataclass(frozen=True)
class Malformed:
    """One of your command records was refused and skipped (nothing was done for it): `what`
    is "checksum", "position" or "field"; `command_position` its ring position, `value` the
    position it claimed or the bad field's value."""

    what: str
    code: int
    command_position: int
    value: int
    position: int


@dataclass(frozen=True)
class EngineRestarted:
    """The engine's epoch changed: an engine restarted on this channel. A new order with no
    answer yet was not sent (cancel it by id to be sure); a cancel with no answer may not have
    been: send it again (docs/ipc.md, "Liveness and restarts")."""

    epoch_before: int
    epoch: int


@dataclass(frozen=True)
class EngineLost:
    """No live engine: it stopped, or its process is gone, or its heartbeat stopped for
    longer than the channel's staleness window. `state` is the header's state by name."""

    state: str
    pid: int


__all__ = [
    "Event",
    "Accepted",
    "PartiallyFilled",
    "Filled",
    "Canceled",
    "Replaced",
    "Rejected",
    "CancelRejected",
    "Unknown",
    "Shed",
    "Throttled",
    "BreakerOpen",
    "Refused",
    "Malformed",
    "EngineRestarted",
    "EngineLost",
]
