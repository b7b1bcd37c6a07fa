//! The exchange core, sans-IO: accounts, orders, books and each account's sequenced stream.
//!
//! Every OUCH message an account sends is answered by appending encoded OUCH messages to that
//! account's stream; message `n` of the stream is SoupBinTCP sequence number `n`. A client
//! that logs in again asking for sequence `k` is replayed the stream from `k`. Synthetic
//! liquidity (makers and takers from a seeded generator) trades against the accounts' orders.
//!
//! Reject codes in Order Rejected are keel's own (OUCH leaves the code table to the venue);
//! [`RejectCode`] lists them and docs/protocol.md documents them.

use keel::hash::{FxHashMap, FxHashSet};

use super::book::{Book, Fill, OrderRef};
use keel::order::{Side, SymbolTable};
use keel::proto::ouch::{
    encode_outbound, ClOrdId, Dialect, EnterOrder, Inbound, OrderAccepted, OrderFields,
    OrderStatus, Outbound, ReplaceOrder,
};
use keel::proto::soupbin::LoginRejectReason;

pub use keel::proto::ouch::RejectCode;

/// Exchange settings.
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    /// Listed symbols.
    pub symbols: Vec<String>,
    /// Password every account must present (usernames are free).
    pub password: String,
    /// Reject a ClOrdID already used by the account today (real venues differ).
    pub reject_duplicate_cl_ord_id: bool,
    /// Largest order quantity.
    pub order_qty_max: u32,
    /// Account message limit: at most this many messages per `rate_window_ns` (0: none).
    pub rate_limit_messages: u32,
    /// Window of the account message limit.
    pub rate_window_ns: u64,
    /// Messages kept per account stream for replay. A message past it is not sequenced and
    /// not sent (counted: `ExchangeStats::stream_full_drops`): the simulator's memory bound,
    /// never a trading day's (`keel venue --stream-messages-max`).
    pub stream_messages_max: usize,
    /// Wire layout.
    pub dialect: Dialect,
    /// Session name announced at login.
    pub session: [u8; 10],
    /// Orders the venue expects in a day: its order table is sized for them up front, so a
    /// busy day does not pause to grow it (it still grows past this).
    pub orders_expected: usize,
    /// Highest limit price accepted (4 decimals); above it an order is rejected
    /// `InvalidPrice`.
    pub price_max: i64,
    /// The price collar, percent: an order more than this far from its symbol's reference price
    /// (the last trade, or `reference_price` before the first) is rejected `InvalidPrice`, so a
    /// hostile order cannot make the venue print a trade at an absurd price to every
    /// subscriber. 0: no collar (only positivity and `price_max`). At most
    /// [`PRICE_BAND_PCT_MAX`].
    pub price_band_pct: u32,
    /// Every symbol's reference price before its first trade (`None`: the collar starts with
    /// the first trade).
    pub reference_price: Option<i64>,
    /// Sink mode (`keel venue --sink`), for throughput benchmarks: every valid order is
    /// accepted and stays open until canceled, but never enters a book, so nothing matches,
    /// trades or moves market data. Validation, sequencing, cancels and replay are as usual.
    pub sink: bool,
}

/// The widest price collar, percent (100: anything from 0 to twice the reference).
pub const PRICE_BAND_PCT_MAX: u32 = 100;

/// The venue's default highest price, 1,000,000.0000 (the engine's default `price_max` too).
pub const PRICE_MAX_DEFAULT: i64 = 1_000_000 * 10_000;

impl Default for ExchangeConfig {
    fn default() -> Self {
        Self {
            symbols: ["AAPL", "MSFT", "AMZN", "NVDA"].map(String::from).to_vec(),
            password: "keel".into(),
            reject_duplicate_cl_ord_id: true,
            order_qty_max: 1_000_000,
            rate_limit_messages: 0,
            rate_window_ns: 1_000_000_000,
            stream_messages_max: 4_000_000,
            dialect: Dialect::SPEC,
            session: *b"KEELSIM001",
            orders_expected: 65_536,
            price_max: PRICE_MAX_DEFAULT,
            price_band_pct: 0,
            reference_price: None,
            sink: false,
        }
    }
}

/// A trade, for market data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trade {
    /// Symbol index.
    pub symbol: u16,
    /// Execution price.
    pub price: i64,
    /// Shares.
    pub qty: u32,
    /// The aggressor bought.
    pub buy: bool,
}

/// Who owns an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// An account's order, by account index and UserRefNum.
    Account {
        /// Account index.
        account: u32,
        /// UserRefNum.
        user_ref: u32,
    },
    /// Synthetic liquidity.
    Synthetic,
}

/// An order the venue knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VenueOrder {
    /// Owner.
    pub owner: Owner,
    /// Symbol index.
    pub symbol: u16,
    /// The order's fields as accepted.
    pub fields: OrderFields,
    /// Shares still open.
    pub open_qty: u32,
    /// Shares executed.
    pub executed_qty: u32,
}

impl Account {
    /// Shares bought and sold today in symbol `symbol` (0 for one never traded).
    pub fn position(&self, symbol: usize) -> (u64, u64) {
        self.positions.get(symbol).copied().unwrap_or_default()
    }

    /// Messages in the stream (the last sequence number sent or to send).
    pub fn stream_len(&self) -> u64 {
        self.stream_ends.len() as u64
    }

    /// Message `seq` (1-based) of the stream.
    pub fn message(&self, seq: u64) -> &[u8] {
        let i = (seq - 1) as usize;
        let start = if i == 0 { 0 } else { self.stream_ends[i - 1] };
        &self.stream_bytes[start..self.stream_ends[i]]
    }

    /// Whether message `seq` is an order's final report (delayed by the final-report fault).
    pub fn is_final(&self, seq: u64) -> bool {
        self.stream_final[(seq - 1) as usize]
    }

    /// Every message of the stream, in order.
    pub fn messages(&self) -> impl Iterator<Item = &[u8]> {
        (1..=self.stream_len()).map(|seq| self.message(seq))
    }
}

/// Reference numbers of synthetic orders have this bit set; account orders' do not.
const SYNTHETIC_REF: OrderRef = 1 << 63;

/// The venue's orders. Account orders live in a dense vector indexed by reference number (kept
/// all day for status queries, appended in order: no hashing, no cache miss on entry);
/// synthetic orders, forgotten once closed, in a hash map.
#[derive(Debug, Default)]
struct Orders {
    accounts: Vec<VenueOrder>,
    synthetic: FxHashMap<OrderRef, VenueOrder>,
}

impl Orders {
    fn with_capacity(orders: usize) -> Self {
        Self {
            accounts: Vec::with_capacity(orders),
            synthetic: FxHashMap::default(),
        }
    }

    /// The reference the next account order gets.
    fn next_account_ref(&self) -> OrderRef {
        self.accounts.len() as OrderRef + 1
    }

    fn get(&self, r: &OrderRef) -> Option<&VenueOrder> {
        if r & SYNTHETIC_REF != 0 {
            self.synthetic.get(r)
        } else {
            self.accounts.get((*r as usize).checked_sub(1)?)
        }
    }

    fn get_mut(&mut self, r: &OrderRef) -> Option<&mut VenueOrder> {
        if r & SYNTHETIC_REF != 0 {
            self.synthetic.get_mut(r)
        } else {
            self.accounts.get_mut((*r as usize).checked_sub(1)?)
        }
    }

    fn insert(&mut self, r: OrderRef, order: VenueOrder) {
        if r & SYNTHETIC_REF != 0 {
            self.synthetic.insert(r, order);
        } else {
            assert_eq!(
                r,
                self.next_account_ref(),
                "account order refs are dense and in order"
            );
            self.accounts.push(order);
        }
    }

    /// Forgets a synthetic order (account orders are kept all day).
    fn remove(&mut self, r: &OrderRef) -> Option<VenueOrder> {
        assert!(
            r & SYNTHETIC_REF != 0,
            "only synthetic orders are forgotten"
        );
        self.synthetic.remove(r)
    }
}

impl std::ops::Index<&OrderRef> for Orders {
    type Output = VenueOrder;

    fn index(&self, r: &OrderRef) -> &VenueOrder {
        self.get(r).expect("order reference is known")
    }
}

/// An account's UserRefNum → order map. UserRefNums only grow (older or equal ones are
/// rejected before an order is booked), so this is an append-only sorted vector: entry is a
/// push, lookup a binary search.
#[derive(Debug, Default)]
struct UserRefs(Vec<(u32, OrderRef)>);

impl UserRefs {
    fn get(&self, user_ref: &u32) -> Option<&OrderRef> {
        let at = self.0.binary_search_by_key(user_ref, |(u, _)| *u).ok()?;
        Some(&self.0[at].1)
    }

    fn insert(&mut self, user_ref: u32, order_ref: OrderRef) {
        assert!(
            self.0.last().is_none_or(|(last, _)| *last < user_ref),
            "UserRefNums are validated increasing"
        );
        self.0.push((user_ref, order_ref));
    }

    fn iter(&self) -> impl Iterator<Item = (&u32, &OrderRef)> {
        self.0.iter().map(|(u, r)| (u, r))
    }
}

/// One account: its orders, ids and sequenced stream.
#[derive(Debug, Default)]
pub struct Account {
    /// Username, space padded.
    pub username: [u8; 6],
    /// The sequenced stream: encoded OUCH messages back to back (amortised, no allocation
    /// per message); `stream_ends[n - 1]` is where message `n` ends.
    stream_bytes: Vec<u8>,
    stream_ends: Vec<usize>,
    /// Whether each stream message is an order's final report (last fill, or its cancel).
    stream_final: Vec<bool>,
    /// Shares bought and sold today, per symbol.
    positions: Vec<(u64, u64)>,
    user_refs: UserRefs,
    cl_ord_ids: FxHashSet<ClOrdId>,
    last_user_ref: u32,
    window_start_ns: u64,
    window_count: u32,
    /// Messages refused by the rate limit.
    pub throttled: u64,
}

/// A lie the hostile venue can tell an account (see [`Exchange::lie`]): a report that
/// contradicts what the account sent and was told. The book and the orders are not touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lie {
    /// An execution for a UserRefNum the account never entered.
    UnknownFill,
    /// An execution of one share more than the newest open order's whole quantity.
    Overfill,
    /// An execution of one share for the newest order the venue closed (filled, canceled).
    FillAfterClose,
    /// An execution of zero shares for the newest open order (an extreme field value).
    ZeroFill,
    /// An execution of one share of the newest open order at ten times its limit for a buy, a
    /// tenth of it for a sell: through the limit, a price it could never trade at.
    OffLimitFill,
}

/// Largest number of shares [`Exchange::lie_position`] books (a billion: past any real day's
/// volume in one symbol, well inside the u64 totals).
pub const POSITION_LIE_MAX: u64 = 1_000_000_000;

/// The UserRefNum an [`Lie::UnknownFill`] names: the last a client could ever use, so never
/// one it entered today.
pub const LIE_UNKNOWN_USER_REF: u32 = u32::MAX;

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    /// Orders accepted.
    pub accepted: u64,
    /// Orders rejected.
    pub rejected: u64,
    /// Fills (each side counted once per match).
    pub matches: u64,
    /// Cancels applied.
    pub canceled: u64,
    /// Orders that reused a UserRefNum or ClOrdID: a client resending. Must stay zero for keel.
    pub duplicate_ids: u64,
    /// Orders rejected `InvalidPrice` (not positive, above `price_max`, or outside the collar).
    pub price_rejects: u64,
    /// Lies told by the hostile-venue fault ([`Exchange::lie`]).
    pub lies: u64,
    /// Messages not sequenced because their account's stream was full
    /// (`stream_messages_max`): an engine then sees no answers; it must not trade on that link.
    pub stream_full_drops: u64,
}

/// The exchange core.
#[derive(Debug)]
pub struct Exchange {
    config: ExchangeConfig,
    symbols: SymbolTable,
    books: Vec<Book>,
    orders: Orders,
    accounts: Vec<Account>,
    by_username: FxHashMap<[u8; 6], u32>,
    /// FIX sessions' accounts, by SenderCompID: a namespace of their own, so a FIX session
    /// never shares a stream with an OUCH login.
    by_comp_id: FxHashMap<String, u32>,
    next_synthetic_ref: OrderRef,
    next_match: u64,
    fills: Vec<Fill>,
    /// Trades since the last [`Exchange::drain_market_data`].
    trades: Vec<Trade>,
    /// Scratch for touched levels.
    touched: Vec<(Side, i64)>,
    scratch: Vec<u8>,
    stats: ExchangeStats,
    /// Reject every order with `SystemUnavailable` while positive (fault injection).
    pub reject_burst_remaining: u32,
    /// The next emitted message closes its order (set just before emitting it).
    next_is_final: bool,
    /// Fault: the next login is replayed from sequence 1 whatever it asks (duplicates).
    pub replay_from_start_once: bool,
    /// Hostile fault: the next login's answer skips this many messages past what was asked
    /// (never past the end of the stream): the client never sees them — a sequence gap.
    pub login_gap_once: u64,
    /// Login answers that really skipped messages (the gap fault found something to skip).
    pub login_gaps_made: u64,
    /// Of those, gaps the client could not have seen: its next login asked again from at or
    /// before where the gapped one asked (the gapped answer never reached it).
    pub login_gaps_covered: u64,
    /// Where the last gapped login asked from, until the next login.
    login_gap_asked: Option<u64>,
    /// Each symbol's reference price for the collar: its last trade (or the configured start).
    reference: Vec<Option<i64>>,
    /// Match numbers of lies count down from here, never meeting the real ones.
    next_lie_match: u64,
    /// The venue's wall clock minus the monotonic clock it is driven by. Message timestamps
    /// are wall-clock; a fault can make the wall clock jump (backwards too). keel reads no
    /// venue timestamp for timing, so a jump must change nothing it decides.
    pub wall_offset_ns: u64,
}

impl Exchange {
    /// A venue with the configured symbols listed and empty books.
    pub fn new(config: ExchangeConfig) -> Self {
        let mut symbols = SymbolTable::with_capacity(config.symbols.len() as u16);
        for s in &config.symbols {
            symbols
                .intern(s)
                .expect("symbol names validated by the caller");
        }
        Self {
            books: (0..config.symbols.len())
                .map(|_| Book::with_capacity(config.orders_expected / config.symbols.len().max(1)))
                .collect(),
            symbols,
            orders: Orders::with_capacity(config.orders_expected),
            accounts: Vec::new(),
            by_username: FxHashMap::default(),
            by_comp_id: FxHashMap::default(),
            next_synthetic_ref: 1,
            next_match: 1,
            fills: Vec::new(),
            trades: Vec::with_capacity(1_024),
            touched: Vec::with_capacity(1_024),
            scratch: vec![0; 512],
            stats: ExchangeStats::default(),
            reject_burst_remaining: 0,
            wall_offset_ns: 0,
            next_is_final: false,
            replay_from_start_once: false,
            login_gap_once: 0,
            login_gaps_made: 0,
            login_gaps_covered: 0,
            login_gap_asked: None,
            reference: vec![config.reference_price; config.symbols.len()],
            next_lie_match: u64::MAX,
            config,
        }
    }

    /// Counters.
    pub fn stats(&self) -> ExchangeStats {
        self.stats
    }

    /// Checks credentials and the requested session; returns the account index and the next
    /// sequence number the client will receive.
    pub fn login(
        &mut self,
        username: [u8; 6],
        password: &[u8; 10],
        session: &[u8; 10],
        requested: u64,
    ) -> Result<(u32, u64), LoginRejectReason> {
        let given = keel::proto::soupbin::alpha::<10>(&self.config.password);
        if *password != given {
            return Err(LoginRejectReason::NotAuthorized);
        }
        if session.iter().any(|&b| b != b' ') && *session != self.config.session {
            return Err(LoginRejectReason::SessionNotAvailable);
        }
        let account = match self.by_username.get(&username) {
            Some(&a) => a,
            None => {
                let a = self.open_account(username);
                self.by_username.insert(username, a);
                a
            }
        };
        let next = self.accounts[account as usize].stream_len() + 1;
        // A gap made at the previous login is covered when this login asks again from at or
        // before where that one asked: the client never applied past the gap (its answer was
        // lost to a cut, say), so there was nothing it could have noticed.
        if let Some(asked) = self.login_gap_asked.take() {
            self.login_gaps_covered += u64::from(requested != 0 && requested <= asked);
        }
        // 0 asks for "from now on"; anything past the end is clamped to the end.
        let start = if std::mem::take(&mut self.replay_from_start_once) {
            1 // fault: a venue that replays the whole day, duplicates included
        } else if requested == 0 {
            next
        } else {
            let gap = std::mem::take(&mut self.login_gap_once);
            let start = requested.saturating_add(gap).min(next);
            let made = start > requested.min(next);
            self.login_gaps_made += u64::from(made);
            if made {
                self.login_gap_asked = Some(requested);
            }
            start
        };
        Ok((account, start))
    }

    /// A new, empty account named `username`.
    fn open_account(&mut self, username: [u8; 6]) -> u32 {
        let symbols = self.books.len();
        let per_account = self.config.orders_expected / 16;
        self.accounts.push(Account {
            username,
            positions: vec![(0, 0); symbols],
            user_refs: UserRefs(Vec::with_capacity(per_account)),
            cl_ord_ids: FxHashSet::with_capacity_and_hasher(per_account, Default::default()),
            ..Account::default()
        });
        (self.accounts.len() - 1) as u32
    }

    /// Whether `given` is the venue's password.
    pub fn password_ok(&self, given: &[u8]) -> bool {
        given == self.config.password.as_bytes()
    }

    /// The account of the FIX session whose SenderCompID is `comp_id` (opened at its first
    /// logon; its username is the CompID's first six bytes, for display only).
    pub fn fix_account(&mut self, comp_id: &str) -> u32 {
        if let Some(&a) = self.by_comp_id.get(comp_id) {
            return a;
        }
        let mut username = [b' '; 6];
        for (u, b) in username.iter_mut().zip(comp_id.bytes()) {
            *u = b;
        }
        let a = self.open_account(username);
        self.by_comp_id.insert(comp_id.to_string(), a);
        a
    }

    /// The next UserRefNum the account may use (one above its last).
    pub fn next_user_ref(&self, account: u32) -> u32 {
        self.accounts[account as usize]
            .last_user_ref
            .saturating_add(1)
    }

    /// The session name announced at login.
    pub fn session(&self) -> [u8; 10] {
        self.config.session
    }

    /// An account.
    pub fn account(&self, account: u32) -> &Account {
        &self.accounts[account as usize]
    }

    /// Every account, in the order they first logged in.
    pub fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    /// The order with this reference.
    pub fn order(&self, order_ref: OrderRef) -> Option<&VenueOrder> {
        self.orders.get(&order_ref)
    }

    /// Every account order still open, in entry order.
    pub fn open_account_orders(&self) -> impl Iterator<Item = &VenueOrder> {
        self.orders.accounts.iter().filter(|o| o.open_qty > 0)
    }

    /// The account's order for `user_ref`.
    pub fn order_of(&self, account: u32, user_ref: u32) -> Option<&VenueOrder> {
        self.accounts[account as usize]
            .user_refs
            .get(&user_ref)
            .and_then(|r| self.orders.get(r))
    }

    /// Everything market data needs since the last call, in order of occurrence per kind:
    /// each changed level with its new total (`qty` 0: gone) and each trade.
    pub fn drain_market_data(
        &mut self,
        mut level: impl FnMut(u16, Side, i64, u64),
        mut trade: impl FnMut(&Trade),
    ) {
        for t in &self.trades {
            trade(t);
        }
        self.trades.clear();
        for (symbol, book) in self.books.iter_mut().enumerate() {
            self.touched.clear();
            book.take_touched(&mut self.touched);
            self.touched
                .sort_unstable_by_key(|&(side, price)| (side == Side::Sell, price));
            self.touched.dedup();
            for &(side, price) in &self.touched {
                level(symbol as u16, side, price, book.level_qty(side, price));
            }
        }
    }

    /// A symbol's book.
    pub fn book(&self, symbol: u16) -> &Book {
        &self.books[usize::from(symbol)]
    }

    /// Handles one message from an account at `now_ns`; answers go to its stream.
    /// Queries are answered whatever the rate: the limit is on order traffic.
    pub fn handle(&mut self, now_ns: u64, account: u32, msg: &Inbound<'_>) {
        let query = matches!(
            msg,
            Inbound::AccountQuery
                | Inbound::OrderStatusQuery { .. }
                | Inbound::ReconcileQuery { .. }
        );
        if !query && !self.within_rate(now_ns, account) {
            self.accounts[account as usize].throttled += 1;
            match msg {
                Inbound::EnterOrder(e) => self.reject(
                    now_ns,
                    account,
                    e.user_ref,
                    RejectCode::Throttled,
                    e.order.cl_ord_id,
                ),
                Inbound::ReplaceOrder(r) => self.reject(
                    now_ns,
                    account,
                    r.user_ref,
                    RejectCode::Throttled,
                    r.cl_ord_id,
                ),
                Inbound::CancelOrder { user_ref, .. } | Inbound::ModifyOrder { user_ref, .. } => {
                    self.emit(
                        account,
                        &Outbound::CancelReject {
                            timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                            user_ref: *user_ref,
                        },
                    );
                }
                Inbound::AccountQuery
                | Inbound::OrderStatusQuery { .. }
                | Inbound::ReconcileQuery { .. } => unreachable!("queries are not rate limited"),
            }
            return;
        }
        match msg {
            Inbound::EnterOrder(e) => self.enter(now_ns, account, e),
            Inbound::ReplaceOrder(r) => self.replace(now_ns, account, r),
            Inbound::CancelOrder { user_ref, qty } => self.cancel(now_ns, account, *user_ref, *qty),
            Inbound::ModifyOrder { user_ref, qty, .. } => {
                self.cancel(now_ns, account, *user_ref, *qty)
            }
            Inbound::AccountQuery => {
                let next = self.accounts[account as usize].last_user_ref + 1;
                self.emit(
                    account,
                    &Outbound::AccountQueryResponse {
                        timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                        next_user_ref: next,
                    },
                );
            }
            Inbound::OrderStatusQuery { user_ref } => self.status(now_ns, account, *user_ref),
            Inbound::ReconcileQuery { token } => self.reconcile(now_ns, account, *token),
        }
    }

    /// Sets the account message limit at run time (`rate-limit` on the control port): at most
    /// `messages` per `window_ns` (0 messages: none). Windows already running keep their count.
    pub fn set_rate_limit(&mut self, messages: u32, window_ns: u64) {
        self.config.rate_limit_messages = messages;
        self.config.rate_window_ns = window_ns.max(1);
    }

    /// The account message limit: messages per window, and the window.
    pub fn rate_limit(&self) -> (u32, u64) {
        (self.config.rate_limit_messages, self.config.rate_window_ns)
    }

    fn within_rate(&mut self, now_ns: u64, account: u32) -> bool {
        if self.config.rate_limit_messages == 0 {
            return true;
        }
        let a = &mut self.accounts[account as usize];
        if now_ns.saturating_sub(a.window_start_ns) >= self.config.rate_window_ns {
            a.window_start_ns = now_ns;
            a.window_count = 0;
        }
        a.window_count += 1;
        a.window_count <= self.config.rate_limit_messages
    }

    fn enter(&mut self, now_ns: u64, account: u32, e: &EnterOrder<'_>) {
        if let Err(code) = self.validate_new(account, e.user_ref, &e.order) {
            return self.reject(now_ns, account, e.user_ref, code, e.order.cl_ord_id);
        }
        let symbol = self.symbols.find(&e.order.symbol).expect("validated").0;
        self.admit(now_ns, account, e.user_ref, 0, symbol, e.order);
    }

    fn validate_new(
        &mut self,
        account: u32,
        user_ref: u32,
        order: &OrderFields,
    ) -> Result<(), RejectCode> {
        if self.reject_burst_remaining > 0 {
            self.reject_burst_remaining -= 1;
            return Err(RejectCode::SystemUnavailable);
        }
        let a = &self.accounts[account as usize];
        if user_ref <= a.last_user_ref
            || (self.config.reject_duplicate_cl_ord_id && a.cl_ord_ids.contains(&order.cl_ord_id))
        {
            self.stats.duplicate_ids += 1;
            return Err(RejectCode::DuplicateId);
        }
        if order.qty == 0 || order.qty > self.config.order_qty_max {
            return Err(RejectCode::InvalidQuantity);
        }
        if order.price <= 0 {
            self.stats.price_rejects += 1;
            return Err(RejectCode::InvalidPrice);
        }
        let Some(symbol) = self.symbols.find(&order.symbol) else {
            return Err(RejectCode::UnknownSymbol);
        };
        if !self.price_within_collar(symbol.0, order.price) {
            self.stats.price_rejects += 1;
            return Err(RejectCode::InvalidPrice);
        }
        Ok(())
    }

    /// Whether `price` is positive, at most `price_max`, and (collar on, reference known) at
    /// most `price_band_pct` percent from the symbol's reference price.
    fn price_within_collar(&self, symbol: u16, price: i64) -> bool {
        if price <= 0 || price > self.config.price_max {
            return false;
        }
        let band = self.config.price_band_pct;
        match self.reference[usize::from(symbol)] {
            Some(reference) if band > 0 => {
                // i128: |price - reference| * 100 cannot overflow whatever the two are.
                let off = (i128::from(price) - i128::from(reference)).abs() * 100;
                off <= i128::from(reference) * i128::from(band)
            }
            _ => true,
        }
    }

    /// A symbol's reference price for the collar (its last trade, or the configured start).
    pub fn reference_price(&self, symbol: u16) -> Option<i64> {
        self.reference[usize::from(symbol)]
    }

    /// Books a validated order (new or replacement), answers Accepted/Replaced, then fills.
    fn admit(
        &mut self,
        now_ns: u64,
        account: u32,
        user_ref: u32,
        orig_user_ref: u32,
        symbol: u16,
        fields: OrderFields,
    ) {
        let order_ref = self.orders.next_account_ref();
        let a = &mut self.accounts[account as usize];
        a.last_user_ref = user_ref;
        a.cl_ord_ids.insert(fields.cl_ord_id);
        a.user_refs.insert(user_ref, order_ref);
        let owner = Owner::Account { account, user_ref };
        self.orders.insert(
            order_ref,
            VenueOrder {
                owner,
                symbol,
                fields,
                open_qty: fields.qty,
                executed_qty: 0,
            },
        );
        self.stats.accepted += 1;
        let accepted = OrderAccepted {
            timestamp: now_ns.wrapping_add(self.wall_offset_ns),
            orig_user_ref,
            user_ref,
            order: fields,
            order_ref,
            state: b'L',
            appendages: &[],
        };
        let msg = if orig_user_ref == 0 {
            Outbound::Accepted(accepted)
        } else {
            Outbound::Replaced(accepted)
        };
        self.emit(account, &msg);
        let ioc = fields.tif == b'3';
        if !self.config.sink {
            self.match_order(now_ns, order_ref, !ioc);
        }
        if ioc {
            self.close_unfilled(now_ns, order_ref, b'I');
        }
    }

    /// Places a synthetic (simulated participant) order and matches it; returns its reference.
    pub fn synthetic(
        &mut self,
        now_ns: u64,
        symbol: u16,
        side: Side,
        price: i64,
        qty: u32,
        rest: bool,
    ) -> OrderRef {
        let order_ref = SYNTHETIC_REF | self.next_synthetic_ref;
        self.next_synthetic_ref += 1;
        let fields = OrderFields {
            side: if side == Side::Buy { b'B' } else { b'S' },
            qty,
            symbol: *self
                .symbols
                .name(keel::order::SymbolId(symbol))
                .expect("listed symbol"),
            price,
            tif: if rest { b'0' } else { b'3' },
            display: b'Y',
            capacity: b'P',
            ise: b'N',
            cross_type: b'N',
            cl_ord_id: [b' '; 14],
        };
        self.orders.insert(
            order_ref,
            VenueOrder {
                owner: Owner::Synthetic,
                symbol,
                fields,
                open_qty: qty,
                executed_qty: 0,
            },
        );
        self.match_order(now_ns, order_ref, rest);
        if !rest {
            self.orders
                .get_mut(&order_ref)
                .expect("just inserted")
                .open_qty = 0;
        }
        self.forget_if_done(order_ref);
        order_ref
    }

    /// Hostile-venue fault: appends `msg` to `account`'s sequenced stream as if the exchange
    /// had sent it, whatever it contradicts (a fill for an order never entered, beyond an
    /// order's quantity, after its close). The book and the orders are not touched: only the
    /// client is lied to. Drills and the deterministic simulation use it.
    pub fn inject(&mut self, account: u32, msg: &Outbound<'_>) {
        if (account as usize) < self.accounts.len() {
            self.emit(account, msg);
        }
    }

    /// Hostile-venue fault: tells every account the lie `lie` (see [`Lie`]), as a sequenced
    /// Order Executed. Returns the accounts lied to with the UserRefNum named; an account with
    /// no order the lie needs (no open order to overfill, none closed) is left alone.
    pub fn lie(&mut self, now_ns: u64, lie: Lie) -> Vec<(u32, u32)> {
        let mut told = Vec::new();
        for account in 0..self.accounts.len() as u32 {
            let target = match lie {
                Lie::UnknownFill => Some((LIE_UNKNOWN_USER_REF, 1, 1_0000)),
                Lie::Overfill => self.newest_account_order(account, true),
                Lie::FillAfterClose => self.newest_account_order(account, false),
                Lie::ZeroFill => self
                    .newest_account_order(account, true)
                    .map(|(user_ref, _, price)| (user_ref, 0, price)),
                Lie::OffLimitFill => self.newest_off_limit(account),
            };
            let Some((user_ref, qty, price)) = target else {
                continue;
            };
            let match_number = self.next_lie_match;
            self.next_lie_match -= 1;
            let msg = Outbound::Executed {
                timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                user_ref,
                qty,
                price,
                liquidity_flag: b'A',
                match_number,
                appendages: &[],
            };
            self.inject(account, &msg);
            self.stats.lies += 1;
            told.push((account, user_ref));
        }
        told
    }

    /// Hostile-venue fault: books `shares` more bought in the first symbol for every account,
    /// with no report — an execution the venue says happened and the client never saw. Only
    /// the next reconciliation answer's position (`y`) shows it. Returns the accounts lied to.
    pub fn lie_position(&mut self, shares: u64) -> Vec<u32> {
        let mut told = Vec::new();
        for (account, a) in self.accounts.iter_mut().enumerate() {
            let Some(first) = a.positions.first_mut() else {
                continue;
            };
            first.0 = first.0.saturating_add(shares);
            self.stats.lies += 1;
            told.push(account as u32);
        }
        told
    }

    /// The account's newest open (or closed) order, as (UserRefNum, the lie's quantity, its
    /// price): an overfill executes one share more than the whole order, a fill after close one.
    fn newest_account_order(&self, account: u32, open: bool) -> Option<(u32, u32, i64)> {
        let a = &self.accounts[account as usize];
        a.user_refs.0.iter().rev().find_map(|(user_ref, r)| {
            let o = self.orders.get(r)?;
            let qty = if open {
                o.fields.qty.checked_add(1)?
            } else {
                1
            };
            ((o.open_qty > 0) == open).then_some((*user_ref, qty, o.fields.price))
        })
    }

    /// The account's newest open order as (UserRefNum, 1 share, a price through its limit).
    fn newest_off_limit(&self, account: u32) -> Option<(u32, u32, i64)> {
        let (user_ref, _, limit) = self.newest_account_order(account, true)?;
        let buy = self.order_of(account, user_ref)?.fields.side == b'B';
        let price = if buy {
            limit.saturating_mul(10)
        } else {
            limit / 10
        };
        Some((user_ref, 1, price))
    }

    /// Every account order the venue knows (open and closed), in entry order.
    pub fn account_orders(&self) -> impl Iterator<Item = &VenueOrder> {
        self.orders.accounts.iter()
    }

    /// Cancels a resting synthetic order (the flow generator keeps books bounded with it).
    pub fn cancel_synthetic(&mut self, order_ref: OrderRef) {
        if let Some(o) = self.orders.get(&order_ref).copied() {
            self.books[usize::from(o.symbol)].reduce(order_ref, 0);
            self.orders.remove(&order_ref);
        }
    }

    /// Synthetic orders are forgotten once closed; account orders stay for status queries.
    fn forget_if_done(&mut self, order_ref: OrderRef) {
        if self
            .orders
            .get(&order_ref)
            .is_some_and(|o| o.owner == Owner::Synthetic && o.open_qty == 0)
        {
            self.orders.remove(&order_ref);
        }
    }

    /// Number of listed symbols.
    pub fn symbol_count(&self) -> u16 {
        self.books.len() as u16
    }

    /// Submits a booked order to its symbol's book and reports every fill to both owners.
    fn match_order(&mut self, now_ns: u64, order_ref: OrderRef, rest: bool) {
        let o = self.orders[&order_ref];
        let side = if o.fields.side == b'B' {
            Side::Buy
        } else {
            Side::Sell
        };
        let (symbol, price, qty) = (o.symbol, o.fields.price, o.open_qty);
        let mut fills = std::mem::take(&mut self.fills);
        fills.clear();
        self.books[usize::from(symbol)].submit(order_ref, side, price, qty, rest, &mut fills);
        for fill in &fills {
            self.reference[usize::from(symbol)] = Some(fill.price);
            self.trades.push(Trade {
                symbol,
                price: fill.price,
                qty: fill.qty,
                buy: side == Side::Buy,
            });
            let match_number = self.next_match;
            self.next_match += 1;
            self.stats.matches += 1;
            self.execute(now_ns, fill.maker, fill.qty, fill.price, b'A', match_number);
            self.execute(now_ns, fill.taker, fill.qty, fill.price, b'R', match_number);
            if fill.maker_done {
                self.forget_if_done(fill.maker);
            }
        }
        self.fills = fills;
    }

    fn execute(
        &mut self,
        now_ns: u64,
        order_ref: OrderRef,
        qty: u32,
        price: i64,
        liquidity_flag: u8,
        match_number: u64,
    ) {
        let Some(order) = self.orders.get_mut(&order_ref) else {
            return;
        };
        order.open_qty -= qty;
        order.executed_qty += qty;
        if let Owner::Account { account, user_ref } = order.owner {
            let position =
                &mut self.accounts[account as usize].positions[usize::from(order.symbol)];
            if order.fields.side == b'B' {
                position.0 += u64::from(qty);
            } else {
                position.1 += u64::from(qty);
            }
            self.next_is_final = order.open_qty == 0;
            let msg = Outbound::Executed {
                timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                user_ref,
                qty,
                price,
                liquidity_flag,
                match_number,
                appendages: &[],
            };
            self.emit(account, &msg);
        }
    }

    /// Closes whatever an order still has open (IOC remainder), reporting Order Canceled.
    fn close_unfilled(&mut self, now_ns: u64, order_ref: OrderRef, reason: u8) {
        let Some(order) = self.orders.get_mut(&order_ref) else {
            return;
        };
        let qty = order.open_qty;
        if qty == 0 {
            return;
        }
        order.open_qty = 0;
        if let Owner::Account { account, user_ref } = order.owner {
            self.stats.canceled += 1;
            self.next_is_final = true;
            self.emit(
                account,
                &Outbound::Canceled {
                    timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                    orig_user_ref: user_ref,
                    user_ref,
                    qty,
                    reason,
                },
            );
        }
    }

    fn cancel(&mut self, now_ns: u64, account: u32, user_ref: u32, leave_qty: u32) {
        let order_ref = self.accounts[account as usize]
            .user_refs
            .get(&user_ref)
            .copied();
        let open = order_ref
            .and_then(|r| self.orders.get(&r))
            .map_or(0, |o| o.open_qty);
        let (Some(order_ref), true) = (order_ref, open > leave_qty) else {
            // Unknown, closed, or nothing to take off: the cancel is refused.
            return self.emit(
                account,
                &Outbound::CancelReject {
                    timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                    user_ref,
                },
            );
        };
        let symbol = self.orders[&order_ref].symbol;
        let taken = if self.config.sink {
            open - leave_qty // never booked: the whole difference comes off
        } else {
            self.books[usize::from(symbol)]
                .reduce(order_ref, leave_qty)
                .unwrap_or(0)
        };
        let order = self.orders.get_mut(&order_ref).expect("looked up above");
        order.open_qty -= taken;
        self.stats.canceled += 1;
        self.next_is_final = order.open_qty == 0;
        self.emit(
            account,
            &Outbound::Canceled {
                timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                orig_user_ref: user_ref,
                user_ref,
                qty: taken,
                reason: b'U',
            },
        );
    }

    fn replace(&mut self, now_ns: u64, account: u32, r: &ReplaceOrder<'_>) {
        let old_ref = self.accounts[account as usize]
            .user_refs
            .get(&r.orig_user_ref)
            .copied();
        let Some(old_ref) = old_ref.filter(|o| self.orders[o].open_qty > 0) else {
            return self.reject(
                now_ns,
                account,
                r.user_ref,
                RejectCode::UnknownOrder,
                r.cl_ord_id,
            );
        };
        let old = self.orders[&old_ref];
        let fields = OrderFields {
            qty: r.qty,
            price: r.price,
            tif: r.tif,
            display: r.display,
            ise: r.ise,
            cl_ord_id: r.cl_ord_id,
            ..old.fields
        };
        if let Err(code) = self.validate_new(account, r.user_ref, &fields) {
            return self.reject(now_ns, account, r.user_ref, code, r.cl_ord_id);
        }
        // The old order leaves the book; the replacement enters with new priority.
        self.books[usize::from(old.symbol)].reduce(old_ref, 0);
        self.orders.get_mut(&old_ref).expect("exists").open_qty = 0;
        self.admit(
            now_ns,
            account,
            r.user_ref,
            r.orig_user_ref,
            old.symbol,
            fields,
        );
    }

    fn status(&mut self, now_ns: u64, account: u32, user_ref: u32) {
        let msg = match self.order_of(account, user_ref) {
            Some(o) => OrderStatus {
                timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                user_ref,
                state: if o.open_qty > 0 { b'L' } else { b'D' },
                side: o.fields.side,
                symbol: o.fields.symbol,
                price: o.fields.price,
                open_qty: o.open_qty,
                executed_qty: o.executed_qty,
                cl_ord_id: o.fields.cl_ord_id,
            },
            None => OrderStatus {
                timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                user_ref,
                state: b'U',
                side: b'B',
                symbol: [b' '; 8],
                price: 0,
                open_qty: 0,
                executed_qty: 0,
                cl_ord_id: [b' '; 14],
            },
        };
        self.emit(account, &Outbound::OrderStatus(msg));
    }

    fn reject(
        &mut self,
        now_ns: u64,
        account: u32,
        user_ref: u32,
        code: RejectCode,
        cl_ord_id: ClOrdId,
    ) {
        self.stats.rejected += 1;
        self.emit(
            account,
            &Outbound::Rejected {
                timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                user_ref,
                reason: code as u16,
                cl_ord_id,
            },
        );
    }

    fn emit(&mut self, account: u32, msg: &Outbound<'_>) {
        let n = encode_outbound(&mut self.scratch, msg, self.config.dialect)
            .expect("scratch fits every message keel's venue sends");
        let a = &mut self.accounts[account as usize];
        let final_report = std::mem::take(&mut self.next_is_final);
        if a.stream_ends.len() < self.config.stream_messages_max {
            a.stream_bytes.extend_from_slice(&self.scratch[..n]);
            a.stream_ends.push(a.stream_bytes.len());
            a.stream_final.push(final_report);
        } else {
            self.stats.stream_full_drops += 1;
        }
    }

    /// Answers a reconciliation query: every open order, every position with activity, then
    /// the end marker naming the last sequence number the answer reflects.
    fn reconcile(&mut self, now_ns: u64, account: u32, token: u32) {
        let as_of_sequence = self.accounts[account as usize].stream_len();
        let mut open: Vec<u32> = self.accounts[account as usize]
            .user_refs
            .iter()
            .filter(|(_, r)| self.orders.get(r).is_some_and(|o| o.open_qty > 0))
            .map(|(u, _)| *u)
            .collect();
        open.sort_unstable();
        for &user_ref in &open {
            self.status(now_ns, account, user_ref);
        }
        let positions = self.accounts[account as usize].positions.clone();
        let mut reported = 0;
        for (symbol, (bought_qty, sold_qty)) in positions.into_iter().enumerate() {
            if bought_qty == 0 && sold_qty == 0 {
                continue;
            }
            let symbol = *self
                .symbols
                .name(keel::order::SymbolId(symbol as u16))
                .expect("listed");
            self.emit(
                account,
                &Outbound::Position {
                    timestamp: now_ns.wrapping_add(self.wall_offset_ns),
                    symbol,
                    bought_qty,
                    sold_qty,
                },
            );
            reported += 1;
        }
        let end = Outbound::ReconcileEnd {
            timestamp: now_ns.wrapping_add(self.wall_offset_ns),
            token,
            open_orders: open.len() as u32,
            positions: reported,
            as_of_sequence,
        };
        self.emit(account, &end);
    }
}

#[cfg(test)]
mod tests;
