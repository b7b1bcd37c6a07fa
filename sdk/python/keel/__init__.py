"""keel's strategy package: trade through a running keel engine from Python (standard library
only). See docs/strategies.md for a walk-through and docs/ipc.md for the channel itself.

    import keel
    with keel.Channel("/dev/shm/keel/strategy-0") as ch:
        ch.wait_live()
        ...
"""

from . import events, layout
from .channel import (
    BUY,
    DAY,
    IOC,
    SELL,
    Channel,
    ChannelBroken,
    ChannelError,
    EngineStopped,
    InUse,
    LayoutError,
    NameError_,
    RingFull,
    TableError,
    fingerprint,
    price,
)
from .events import (
    Accepted,
    BreakerOpen,
    CancelRejected,
    Canceled,
    EngineLost,
    EngineRestarted,
    Filled,
    Malformed,
    PartiallyFilled,
    Refused,
    Rejected,
    Replaced,
    Shed,
    Throttled,
    Unknown,
)

from .market_data import MarketData, Top, Trade, TradeGap

__version__ = "0.1.0"
