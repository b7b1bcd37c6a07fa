//! The engine's configuration file (TOML). Every key is optional except the venues'; what is
//! left out takes the default listed in docs/config.md. Anything keel does not know, a value of
//! the wrong type, or a value out of range is refused with the key, the value and what is
//! allowed — a misspelt key is never silently ignored.

use std::path::PathBuf;

use toml::{Table, Value};

pub mod print;
pub mod section;
pub use print::to_toml;
pub use section::{
    parse_duration, DurationError, FileConfigError, DURATION_NS_MAX, DURATION_UNITS,
};
use section::{Result, Section};

use crate::dispatch::DispatcherConfig;
use crate::engine::{IpcConfig, LoopConfig, Topology};
use crate::guard::limiter::WindowLimit;
use crate::journal::{JournalConfig, RECORD_LEN};
use crate::order::SymbolName;
use crate::runtime::IdlePolicy;
use crate::session::link::LinkConfig;

pub use crate::engine::EngineConfig;
pub use crate::session::{ProtocolConfig, VenueLinkConfig};

/// The engine reactor's per-connection receive buffer (`net::ReactorConfig` default).
const LINK_RECV_BUFFER_BYTES: usize = 64 * 1024;
/// Smallest `max_packet_len`: room for every message the session itself receives.
const PACKET_LEN_MIN: usize = 256;

impl EngineConfig {
    /// Parses and checks a configuration file's text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let root: Table = text
            .parse()
            .map_err(|e: toml::de::Error| FileConfigError::Syntax(e.to_string()))?;
        let mut top = Section::new("", &root);
        let mut symbols = Vec::new();
        for v in top.array("symbols")? {
            match v {
                Value::String(s) if !s.is_empty() && s.len() <= 8 && s.is_ascii() => {
                    symbols.push(crate::proto::soupbin::alpha::<8>(s))
                }
                other => {
                    return Err(top.wrong("symbols", other, "names of 1 to 8 ASCII characters"))
                }
            }
        }
        if symbols.is_empty() {
            return Err(FileConfigError::Missing("symbols".into()));
        }
        let mut d = DispatcherConfig {
            symbols: u16::try_from(symbols.len()).map_err(|_| FileConfigError::OutOfRange {
                key: "symbols".into(),
                value: symbols.len().to_string(),
                allowed: "at most 65535 symbols",
            })?,
            ..DispatcherConfig::default()
        };
        let mut strategy_quotas = Vec::new();
        if let Some(t) = top.subtable("dispatcher")? {
            read_dispatcher(Section::new("dispatcher", t), &mut d, &mut strategy_quotas)?;
        }
        let journal = match top.subtable("journal")? {
            Some(t) => Some(read_journal(Section::new("journal", t))?),
            None => None,
        };
        let loops = match top.subtable("engine")? {
            Some(t) => read_loops(Section::new("engine", t))?,
            None => LoopConfig::default(),
        };
        let ipc = match top.subtable("ipc")? {
            Some(t) => Some(read_ipc(Section::new("ipc", t))?),
            None => None,
        };
        let wire_log = match top.subtable("wire_log")? {
            Some(t) => Some(read_wire_log(Section::new("wire_log", t))?),
            None => None,
        };
        let mut metrics = match top.subtable("metrics")? {
            Some(t) => read_metrics(Section::new("metrics", t))?,
            None => crate::engine::MetricsConfig::default(),
        };
        if let Some(t) = top.subtable("alerts")? {
            metrics.alerts = read_alerts(Section::new("alerts", t))?;
        }
        if let Some(t) = top.subtable("budget")? {
            metrics.budget = read_budget(Section::new("budget", t))?;
        }
        if let Some(t) = top.subtable("control")? {
            metrics.control = read_control(Section::new("control", t), &symbols)?;
        }
        let operator = match top.subtable("operator")? {
            Some(t) => read_operator(Section::new("operator", t))?,
            None => crate::engine::OperatorConfig::default(),
        };
        let mut feeds = Vec::new();
        for (i, v) in top.array("feed")?.iter().enumerate() {
            let prefix = format!("feed[{i}]");
            let Value::Table(t) = v else {
                return Err(FileConfigError::WrongType {
                    key: prefix,
                    value: v.to_string(),
                    expected: "a table ([[feed]])",
                });
            };
            let feed = read_feed(Section::new(&prefix, t), &symbols)?;
            // One trust store per transport: every TLS feed names the same CA file.
            let ca =
                |f: &crate::feed::handler::FeedConfig| f.tls.as_ref().map(|t| t.ca_file.clone());
            if let (Some(mine), Some(first)) = (
                ca(&feed),
                feeds
                    .iter()
                    .find_map(|f: &crate::feed::handler::FeedConfig| ca(f)),
            ) {
                if mine != first {
                    return Err(FileConfigError::OutOfRange {
                        key: format!("{prefix}.tls_ca_file"),
                        value: format!("{mine:?}"),
                        allowed: "the same as every other TLS feed's (one trust store)",
                    });
                }
            }
            feeds.push(feed);
        }
        let mut venues = Vec::new();
        for (i, v) in top.array("venue")?.iter().enumerate() {
            let prefix = format!("venue[{i}]");
            let Value::Table(t) = v else {
                return Err(FileConfigError::WrongType {
                    key: prefix,
                    value: v.to_string(),
                    expected: "a table ([[venue]])",
                });
            };
            venues.push(read_venue(Section::new(&prefix, t))?);
        }
        if venues.is_empty() {
            return Err(FileConfigError::Missing("venue".into()));
        }
        top.finish()?;
        d.venues = venues.len() as u16;
        d.validate()?;
        let config = Self {
            symbols,
            dispatcher: d,
            journal,
            venues,
            loops,
            ipc,
            feeds,
            operator,
            wire_log,
            metrics,
            strategy_quotas,
        };
        config.check_memory()?;
        if config.metrics.control.enabled && config.counters_file().is_none() {
            // The controller reads the counters file: without one it would steer blind.
            return Err(FileConfigError::OutOfRange {
                key: "control.enabled".into(),
                value: "true".into(),
                allowed: "true only with a counters file ([metrics] enabled, with `file` \
                          or an [ipc] directory)",
            });
        }
        Ok(config)
    }

    /// What the engine allocates at start for this configuration, largest parts named: the
    /// order table, each venue session's order map, the rings and shared-memory channels, and
    /// the journal's current and next file (mapped and populated, so appends never fault).
    pub fn memory_need(&self) -> MemoryNeed {
        let d = &self.dispatcher;
        let mut need = MemoryNeed::default();
        need.add(
            "dispatcher.orders_max",
            crate::order::OrderTable::memory_bytes(d.orders_max, d.strategies),
        );
        // Each venue's three lanes (entries of at most 64 bytes: an order and its stamps).
        let lanes = u64::from(d.lane_cancel_capacity)
            + u64::from(d.lane_replace_capacity)
            + u64::from(d.lane_new_capacity);
        need.add("dispatcher lanes", lanes * 64 * self.venues.len() as u64);
        for v in &self.venues {
            need.add(
                "venue.orders_max",
                crate::session::registry::protocol_memory_bytes(v),
            );
        }
        let ring = |capacity: u32, record: usize| u64::from(capacity) * record as u64;
        let strategy_rings = ring(self.loops.strategy_ring, 2 * 64);
        need.add(
            "engine.strategy_ring",
            strategy_rings * u64::from(d.strategies),
        );
        let venue_rings = ring(self.loops.venue_ring, 2 * 64);
        need.add("engine.venue_ring", venue_rings * self.venues.len() as u64);
        if let Some(journal) = &self.journal {
            need.add("journal.file_bytes", journal.file_bytes.saturating_mul(2));
        }
        if let Some(w) = &self.wire_log {
            need.add(
                "wire_log.ring_bytes",
                u64::from(w.ring_bytes) * self.venues.len() as u64,
            );
        }
        if let Some(ipc) = &self.ipc {
            let channel = ring(ipc.command_capacity + ipc.event_capacity, 64) + 4_096;
            need.add("ipc capacities", channel * u64::from(d.strategies));
            let market_data = 4_096
                + self.symbols.len() as u64 * crate::ipc::md::SLOT_LEN as u64
                + u64::from(ipc.market_data_trades) * crate::ipc::md::TRADE_LEN as u64;
            need.add(
                "ipc.market_data_trades",
                market_data * self.feeds.len() as u64,
            );
        }
        need
    }

    /// Refuses a configuration whose start-up allocation exceeds `engine.memory_max_bytes`
    /// (default: the machine's physical memory), with the figure and the largest part.
    fn check_memory(&self) -> Result<()> {
        let need = self.memory_need();
        let limit = self
            .loops
            .memory_max_bytes
            .unwrap_or_else(physical_memory_bytes);
        if need.total_bytes > limit {
            return Err(FileConfigError::MemoryNeed {
                need_bytes: need.total_bytes,
                limit_bytes: limit,
                largest_key: need.largest_key,
                largest_bytes: need.largest_bytes,
            });
        }
        Ok(())
    }
}

/// Something in an accepted configuration that will not work as written on this machine:
/// said on stderr by `keel config-check` and `keel run` (`keel: warning: ...`), never a refusal
/// (the file may be meant for another host).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigWarning {
    /// A loop is pinned to a core this machine does not have: it will run unpinned.
    #[error(
        "engine.{key} = {core}: this machine has {cores} cores (0..={last}); the loop will run \
         unpinned",
        last = cores.saturating_sub(1)
    )]
    CoreMissing {
        /// `dispatcher_core` or `executor_core`.
        key: &'static str,
        /// The core asked for.
        core: usize,
        /// The cores this process may use.
        cores: usize,
    },
    /// A directory (or the admin socket) whose parent does not exist (a typo, or a mount
    /// missing on this host).
    #[error("{key} = \"{}\": its parent directory {} does not exist", dir.display(), parent.display())]
    ParentMissing {
        /// `journal.dir`, `ipc.dir`, `wire_log.dir` or `operator.admin_socket`.
        key: &'static str,
        /// The path configured.
        dir: PathBuf,
        /// Its parent, missing.
        parent: PathBuf,
    },
    /// A feed's CA file cannot be used here: missing, unreadable, or no certificate in it (the
    /// engine would refuse to start).
    #[error("feed[{feed}].tls_ca_file = \"{}\": {why}", file.display())]
    CaFile {
        /// The feed.
        feed: usize,
        /// The file.
        file: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl EngineConfig {
    /// What will not work as written on this machine (see [`ConfigWarning`]): pinned cores
    /// it lacks, directories whose parent does not exist.
    pub fn warnings(&self) -> Vec<ConfigWarning> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.warnings_for(cores)
    }

    /// [`EngineConfig::warnings`] on a machine with `cores` cores.
    pub fn warnings_for(&self, cores: usize) -> Vec<ConfigWarning> {
        let mut warnings = Vec::new();
        let split = self.loops.topology == Topology::Split;
        let pinned = [
            ("dispatcher_core", self.loops.dispatcher_core, true),
            ("executor_core", self.loops.executor_core, split),
        ];
        for (key, core, used) in pinned {
            if let Some(core) = core.filter(|&c| used && c >= cores) {
                warnings.push(ConfigWarning::CoreMissing { key, core, cores });
            }
        }
        let dirs = [
            ("journal.dir", self.journal.as_ref().map(|j| &j.dir)),
            ("ipc.dir", self.ipc.as_ref().map(|i| &i.dir)),
            ("wire_log.dir", self.wire_log.as_ref().map(|w| &w.dir)),
            ("operator.admin_socket", self.operator.admin_socket.as_ref()),
        ];
        for (key, dir) in dirs {
            let Some(dir) = dir else { continue };
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => continue, // `/` or a name relative to the working directory
            };
            if !parent.is_dir() {
                warnings.push(ConfigWarning::ParentMissing {
                    key,
                    dir: dir.clone(),
                    parent: parent.to_path_buf(),
                });
            }
        }
        for (feed, f) in self.feeds.iter().enumerate() {
            let Some(file) = f.tls.as_ref().and_then(|t| t.ca_file.as_ref()) else {
                continue;
            };
            if let Err(e) = crate::net::tls::client_config(Some(file)) {
                warnings.push(ConfigWarning::CaFile {
                    feed,
                    file: file.clone(),
                    why: e.to_string(),
                });
            }
        }
        warnings
    }
}

/// Memory a configuration needs at start (see [`EngineConfig::memory_need`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryNeed {
    /// Everything.
    pub total_bytes: u64,
    /// The key behind the largest part.
    pub largest_key: &'static str,
    /// That part.
    pub largest_bytes: u64,
}

impl MemoryNeed {
    fn add(&mut self, key: &'static str, bytes: u64) {
        self.total_bytes = self.total_bytes.saturating_add(bytes);
        if bytes > self.largest_bytes {
            self.largest_bytes = bytes;
            self.largest_key = key;
        }
    }
}

/// The machine's physical memory, from /proc/meminfo (`u64::MAX` where it cannot be read: no
/// ceiling then but a configured one).
fn physical_memory_bytes() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return u64::MAX;
    };
    text.lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map_or(u64::MAX, |kb| kb.saturating_mul(1024))
}

fn read_feed(
    mut s: Section<'_>,
    symbols: &[SymbolName],
) -> Result<crate::feed::handler::FeedConfig> {
    let mut c = crate::feed::handler::FeedConfig {
        symbols: symbols
            .iter()
            .map(|n| String::from_utf8_lossy(n).trim_end().to_string())
            .collect(),
        ..crate::feed::handler::FeedConfig::default()
    };
    let text = s.required_string("address")?;
    c.addr = text.parse().map_err(|_| FileConfigError::WrongType {
        key: s.key("address"),
        value: format!("\"{text}\""),
        expected: "an IP address and port, e.g. \"127.0.0.1:15002\"",
    })?;
    for (i, v) in s.array("alternates")?.iter().enumerate() {
        let addr = v.as_str().and_then(|t| t.parse().ok());
        let Some(addr) = addr else {
            return Err(FileConfigError::WrongType {
                key: format!("{}[{i}]", s.key("alternates")),
                value: v.to_string(),
                expected: "an IP address and port, e.g. \"127.0.0.1:15012\"",
            });
        };
        c.alternates.push(addr);
    }
    if c.alternates.len() > 64 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("alternates"),
            value: c.alternates.len().to_string(),
            allowed: "at most 64 addresses",
        });
    }
    if let Some(path) = s.string("path")? {
        c.path = path.to_string();
    }
    s.bool("trades", &mut c.trades)?;
    read_seed(&mut s, "seed", &mut c.seed)?;
    s.duration("backoff_base_ns", &mut c.backoff.base_ns)?;
    s.duration("backoff_cap_ns", &mut c.backoff.cap_ns)?;
    s.duration("resync_retry_ns", &mut c.resync_retry_ns)?;
    s.duration("silent_ns", &mut c.silent_ns)?;
    s.int("pending_max", &mut c.pending_max)?;
    if !(1..=1_048_576).contains(&c.pending_max) {
        return Err(FileConfigError::OutOfRange {
            key: s.key("pending_max"),
            value: c.pending_max.to_string(),
            allowed: "1..=1048576",
        });
    }
    if c.backoff.base_ns == 0 || c.backoff.cap_ns < c.backoff.base_ns {
        return Err(FileConfigError::OutOfRange {
            key: s.key("backoff_cap_ns"),
            value: c.backoff.cap_ns.to_string(),
            allowed: ">= backoff_base_ns >= 1",
        });
    }
    read_feed_tls(&mut s, &mut c)?;
    read_feed_snapshot(&mut s, &mut c)?;
    s.finish()?;
    Ok(c)
}

/// `tls`, `tls_server_name`, `tls_ca_file` of a `[[feed]]`.
fn read_feed_tls(s: &mut Section<'_>, c: &mut crate::feed::handler::FeedConfig) -> Result<()> {
    let mut tls = false;
    s.bool("tls", &mut tls)?;
    let name = s.string("tls_server_name")?;
    let ca = s.string("tls_ca_file")?;
    if !tls {
        if let Some((key, value)) = name
            .map(|v| ("tls_server_name", v))
            .or(ca.map(|v| ("tls_ca_file", v)))
        {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: format!("{value:?}"),
                allowed: "only with tls = true",
            });
        }
        return Ok(());
    }
    let server_name = name.map_or_else(|| c.addr.ip().to_string(), str::to_string);
    if crate::net::tls::server_name(&server_name).is_err() {
        return Err(FileConfigError::WrongType {
            key: s.key("tls_server_name"),
            value: format!("{server_name:?}"),
            expected: "a DNS name or an IP address",
        });
    }
    c.tls = Some(crate::feed::handler::FeedTls {
        server_name,
        ca_file: ca.map(std::path::PathBuf::from),
    });
    Ok(())
}

/// `snapshot` and the `rest_*` keys of a `[[feed]]`.
fn read_feed_snapshot(s: &mut Section<'_>, c: &mut crate::feed::handler::FeedConfig) -> Result<()> {
    use crate::feed::handler::{RestSnapshots, SnapshotSource};
    let rest = match s.string("snapshot")? {
        None | Some("ws") => false,
        Some("rest") => true,
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key("snapshot"),
                value: format!("\"{other}\""),
                allowed: "\"ws\" or \"rest\"",
            })
        }
    };
    const KEYS: [&str; 13] = [
        "rest_address",
        "rest_path",
        "rest_depth_limit",
        "rest_depth_weight",
        "rest_second_weight",
        "rest_minute_weight",
        "rest_connections",
        "rest_acquire_timeout_ns",
        "rest_timeout_ns",
        "rest_retry_attempts",
        "rest_api_key",
        "rest_used_weight_second_header",
        "rest_used_weight_minute_header",
    ];
    if !rest {
        if let Some(key) = KEYS.iter().find(|k| s.table.contains_key(**k)) {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: s.table[*key].to_string(),
                allowed: "only with snapshot = \"rest\"",
            });
        }
        return Ok(());
    }
    let text = s.required_string("rest_address")?;
    let address = text.parse().map_err(|_| FileConfigError::WrongType {
        key: s.key("rest_address"),
        value: format!("\"{text}\""),
        expected: "an IP address and port, e.g. \"127.0.0.1:15003\"",
    })?;
    let mut r = RestSnapshots::new(address);
    if let Some(path) = s.string("rest_path")? {
        if !path.starts_with('/')
            || path
                .bytes()
                .any(|b| b <= b' ' || b == b'?' || b == b'#' || b >= 0x7f)
        {
            return Err(FileConfigError::WrongType {
                key: s.key("rest_path"),
                value: format!("{path:?}"),
                expected: "an absolute path without spaces, controls or a query",
            });
        }
        r.path = path.to_string();
    }
    s.int("rest_depth_limit", &mut r.depth_limit)?;
    s.int("rest_depth_weight", &mut r.depth_weight)?;
    s.int("rest_second_weight", &mut r.second_weight)?;
    s.int("rest_minute_weight", &mut r.minute_weight)?;
    s.int("rest_connections", &mut r.connections)?;
    s.duration("rest_acquire_timeout_ns", &mut r.acquire_timeout_ns)?;
    s.duration("rest_timeout_ns", &mut r.timeout_ns)?;
    s.int("rest_retry_attempts", &mut r.retry_attempts)?;
    if let Some(key) = s.string("rest_api_key")? {
        if key.is_empty() || key.len() > 256 || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(FileConfigError::WrongType {
                key: s.key("rest_api_key"),
                value: "(not shown)".into(),
                expected: "1 to 256 visible ASCII characters",
            });
        }
        r.api_key = Some(key.to_string());
    }
    for (i, name) in [
        "rest_used_weight_second_header",
        "rest_used_weight_minute_header",
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(h) = s.string(name)? {
            if !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(FileConfigError::WrongType {
                    key: s.key(name),
                    value: format!("{h:?}"),
                    expected: "a header name (letters, digits, '-', '_'), or \"\" for none",
                });
            }
            r.used_weight_headers[i] = h.to_string();
        }
    }
    let checks: [(&str, u64, u64, u64); 8] = [
        ("rest_depth_limit", u64::from(r.depth_limit), 1, 5_000),
        (
            "rest_second_weight",
            u64::from(r.second_weight),
            1,
            1_000_000,
        ),
        (
            "rest_minute_weight",
            u64::from(r.minute_weight),
            1,
            1_000_000,
        ),
        (
            "rest_depth_weight",
            u64::from(r.depth_weight),
            1,
            // The minute bucket's burst must fit the limiter's arithmetic.
            u64::from(r.second_weight.min(r.minute_weight).min(100_000)),
        ),
        ("rest_connections", r.connections as u64, 1, 64),
        (
            "rest_acquire_timeout_ns",
            r.acquire_timeout_ns,
            1_000_000,
            3_600_000_000_000,
        ),
        (
            "rest_timeout_ns",
            r.timeout_ns,
            1_000_000,
            3_600_000_000_000,
        ),
        ("rest_retry_attempts", u64::from(r.retry_attempts), 1, 100),
    ];
    for (key, value, min, max) in checks {
        if !(min..=max).contains(&value) {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: value.to_string(),
                allowed: match key {
                    "rest_depth_limit" => "1..=5000",
                    "rest_second_weight" => "1..=1000000",
                    "rest_minute_weight" => "1..=1000000",
                    "rest_depth_weight" => {
                        "1..=min(rest_second_weight, rest_minute_weight, 100000)"
                    }
                    "rest_connections" => "1..=64",
                    "rest_retry_attempts" => "1..=100",
                    _ => "1ms..=60m",
                },
            });
        }
    }
    c.snapshot = SnapshotSource::Rest(Box::new(r));
    Ok(())
}

fn read_loops(mut s: Section<'_>) -> Result<LoopConfig> {
    let topology = match s.string("topology")? {
        None | Some("inline") => Topology::Inline,
        Some("split") => Topology::Split,
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key("topology"),
                value: format!("\"{other}\""),
                allowed: "\"inline\" or \"split\"",
            })
        }
    };
    let transport = match s.string("transport")? {
        None => crate::net::TransportKind::default(),
        Some(name) => name.parse().map_err(|_| FileConfigError::OutOfRange {
            key: s.key("transport"),
            value: format!("\"{name}\""),
            allowed: "\"io_uring\", \"epoll\" or \"af_xdp\"",
        })?,
    };
    let idle = read_idle(&mut s, "idle")?.unwrap_or(IdlePolicy::BusySpin);
    let executor_idle = read_idle(&mut s, "executor_idle")?.unwrap_or(idle);
    let mut c = LoopConfig {
        topology,
        transport,
        idle,
        executor_idle,
        ..LoopConfig::default()
    };
    let mut core: i64 = -1;
    s.int("dispatcher_core", &mut core)?;
    c.dispatcher_core = usize::try_from(core).ok();
    let mut core: i64 = -1;
    s.int("executor_core", &mut core)?;
    c.executor_core = usize::try_from(core).ok();
    s.duration("executor_stall_ns", &mut c.executor_stall_ns)?;
    s.int("strategy_ring", &mut c.strategy_ring)?;
    s.int("venue_ring", &mut c.venue_ring)?;
    let mut memory_max_bytes: u64 = 0;
    s.int("memory_max_bytes", &mut memory_max_bytes)?;
    c.memory_max_bytes = (memory_max_bytes > 0).then_some(memory_max_bytes);
    for (key, value) in [
        ("strategy_ring", c.strategy_ring),
        ("venue_ring", c.venue_ring),
    ] {
        if !(16..=1 << 20).contains(&value) {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: value.to_string(),
                allowed: "16..=1048576",
            });
        }
    }
    if c.executor_stall_ns == 0 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("executor_stall_ns"),
            value: "0".into(),
            allowed: ">= 1",
        });
    }
    read_reactor(&mut s, &mut c.reactor)?;
    if let Some(t) = s.subtable("af_xdp")? {
        read_af_xdp(Section::new("engine.af_xdp", t), &mut c.reactor.xdp)?;
    }
    if c.transport == crate::net::TransportKind::AfXdp {
        for (key, missing) in [
            ("interface", c.reactor.xdp.interface.is_none()),
            ("address", c.reactor.xdp.address.is_none()),
        ] {
            if missing {
                return Err(FileConfigError::Missing(format!("engine.af_xdp.{key}")));
            }
        }
    }
    s.finish()?;
    Ok(c)
}

/// `[engine.af_xdp]`: the AF_XDP transport's interface, address and UMEM
/// (`net::xdp::XdpConfig`, docs/config.md). Ranges are the transport's own
/// (`XdpConfig::validate`).
fn read_af_xdp(mut s: Section<'_>, x: &mut crate::net::xdp::XdpConfig) -> Result<()> {
    use crate::net::xdp::{IfName, XdpAttach, XdpCopy};
    let out_of_range = |s: &Section<'_>, key: &str, value: &str, allowed: &'static str| {
        FileConfigError::OutOfRange {
            key: s.key(key),
            value: format!("\"{value}\""),
            allowed,
        }
    };
    if let Some(name) = s.string("interface")?.filter(|n| !n.is_empty()) {
        x.interface = Some(IfName::new(name).map_err(|_| {
            out_of_range(&s, "interface", name, "an interface name of 1 to 15 bytes")
        })?);
    }
    s.int("queue", &mut x.queue)?;
    if let Some(text) = s.string("address")?.filter(|t| !t.is_empty()) {
        let parsed = text
            .split_once('/')
            .and_then(|(ip, len)| Some((ip.parse().ok()?, len.parse().ok()?)));
        x.address = Some(parsed.ok_or_else(|| {
            out_of_range(
                &s,
                "address",
                text,
                "an IPv4 address and prefix length: \"10.0.0.2/24\"",
            )
        })?);
    }
    if let Some(text) = s.string("gateway")?.filter(|t| !t.is_empty()) {
        x.gateway = Some(
            text.parse()
                .map_err(|_| out_of_range(&s, "gateway", text, "an IPv4 address, or \"\""))?,
        );
    }
    if let Some(text) = s.string("mac")?.filter(|t| !t.is_empty()) {
        x.mac = Some(parse_mac(text).ok_or_else(|| {
            out_of_range(
                &s,
                "mac",
                text,
                "six hex bytes: \"02:00:00:00:00:01\", or \"\"",
            )
        })?);
    }
    s.int("frames", &mut x.frames)?;
    s.int("frame_bytes", &mut x.frame_bytes)?;
    s.int("ring_entries", &mut x.ring_entries)?;
    s.int("rx_batch", &mut x.rx_batch)?;
    s.int("local_port_first", &mut x.local_ports.0)?;
    s.int("local_port_last", &mut x.local_ports.1)?;
    if let Some(text) = s.string("copy")? {
        x.copy = match text {
            "copy" => XdpCopy::Copy,
            "zero-copy" => XdpCopy::ZeroCopy,
            _ => return Err(out_of_range(&s, "copy", text, "\"copy\" or \"zero-copy\"")),
        };
    }
    if let Some(text) = s.string("attach")? {
        x.attach = match text {
            "native" => XdpAttach::Native,
            "generic" => XdpAttach::Generic,
            _ => {
                return Err(out_of_range(
                    &s,
                    "attach",
                    text,
                    "\"native\" or \"generic\"",
                ))
            }
        };
    }
    s.bool("verify_checksums", &mut x.verify_checksums)?;
    x.validate().map_err(|e| match e {
        crate::net::xdp::XdpError::BadConfig { key, value, why } => FileConfigError::OutOfRange {
            key: s.key(key),
            value,
            allowed: why,
        },
        other => FileConfigError::OutOfRange {
            key: s.key("?"),
            value: other.to_string(),
            allowed: "",
        },
    })?;
    s.finish()
}

/// `02:00:00:00:00:01` as six bytes.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Largest io_uring submission queue (the kernel's IORING_MAX_ENTRIES).
const RING_ENTRIES_MAX: u32 = 32_768;
/// Longest SQPOLL idle time accepted, ms (beyond a minute the kernel thread is just spinning).
const SQPOLL_IDLE_MS_MAX: u32 = 60_000;
/// Kernel send buffer bounds, bytes (below 4 KiB the kernel rounds up anyway; 1 GiB is far
/// beyond any sane `net.core.wmem_max`).
const SOCKET_SEND_BUFFER_BYTES: std::ops::RangeInclusive<u32> = 4_096..=1 << 30;

/// The executor loop's transport settings, in `[engine]` (`net::ReactorConfig`).
fn read_reactor(s: &mut Section<'_>, r: &mut crate::net::ReactorConfig) -> Result<()> {
    use crate::net::WaitMode;
    r.wait = match s.string("wait")? {
        None | Some("blocking") => WaitMode::Blocking,
        Some("busy-poll") => WaitMode::BusyPoll,
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key("wait"),
                value: format!("\"{other}\""),
                allowed: "\"blocking\" or \"busy-poll\"",
            })
        }
    };
    s.bool("spin_reads", &mut r.spin_reads)?;
    if r.spin_reads && r.wait != WaitMode::BusyPoll {
        return Err(FileConfigError::OutOfRange {
            key: s.key("spin_reads"),
            value: "true".into(),
            allowed: "true only with wait = \"busy-poll\" (it does nothing otherwise)",
        });
    }
    let mut sqpoll_idle_ms: u32 = 0;
    s.int("sqpoll_idle_ms", &mut sqpoll_idle_ms)?;
    if sqpoll_idle_ms > SQPOLL_IDLE_MS_MAX {
        return Err(FileConfigError::OutOfRange {
            key: s.key("sqpoll_idle_ms"),
            value: sqpoll_idle_ms.to_string(),
            allowed: "0 (off) or 1..=60000",
        });
    }
    r.sqpoll_idle_ms = (sqpoll_idle_ms > 0).then_some(sqpoll_idle_ms);
    s.int("ring_entries", &mut r.ring_entries)?;
    if !r.ring_entries.is_power_of_two() || !(2..=RING_ENTRIES_MAX).contains(&r.ring_entries) {
        return Err(FileConfigError::OutOfRange {
            key: s.key("ring_entries"),
            value: r.ring_entries.to_string(),
            allowed: "a power of two in 2..=32768",
        });
    }
    let mut send_buffer: u32 = 0;
    s.int("socket_send_buffer_bytes", &mut send_buffer)?;
    if send_buffer != 0 && !SOCKET_SEND_BUFFER_BYTES.contains(&send_buffer) {
        return Err(FileConfigError::OutOfRange {
            key: s.key("socket_send_buffer_bytes"),
            value: send_buffer.to_string(),
            allowed: "0 (the kernel's default) or 4096..=1073741824",
        });
    }
    r.socket_send_buffer = (send_buffer > 0).then_some(send_buffer);
    read_uring(s, &mut r.uring)
}

/// Provided-buffer bounds for multishot receive: at most the kernel's 32,768 buffers, each
/// 64 B to 1 MiB.
const PROVIDED_BUFFERS_MAX: u16 = 32_768;
const PROVIDED_BUFFER_BYTES: std::ops::RangeInclusive<u32> = 64..=1 << 20;

/// The io_uring shortcuts, `uring_*` in `[engine]` (`net::UringFeatures`).
fn read_uring(s: &mut Section<'_>, u: &mut crate::net::UringFeatures) -> Result<()> {
    s.bool("uring_registered_buffers", &mut u.registered_buffers)?;
    s.bool("uring_fixed_files", &mut u.fixed_files)?;
    s.bool("uring_direct_spin_reads", &mut u.direct_spin_reads)?;
    s.bool("uring_multishot_recv", &mut u.multishot_recv)?;
    s.int("uring_provided_buffers", &mut u.provided_buffers)?;
    if !u.provided_buffers.is_power_of_two() || u.provided_buffers > PROVIDED_BUFFERS_MAX {
        return Err(FileConfigError::OutOfRange {
            key: s.key("uring_provided_buffers"),
            value: u.provided_buffers.to_string(),
            allowed: "a power of two in 1..=32768",
        });
    }
    s.int("uring_provided_buffer_bytes", &mut u.provided_buffer_bytes)?;
    if !PROVIDED_BUFFER_BYTES.contains(&u.provided_buffer_bytes) {
        return Err(FileConfigError::OutOfRange {
            key: s.key("uring_provided_buffer_bytes"),
            value: u.provided_buffer_bytes.to_string(),
            allowed: "64..=1048576",
        });
    }
    Ok(())
}

/// A seed the file sets (any integer 0..=2^63-1) is fixed; absent, it stays drawn from the OS.
fn read_seed<'a>(s: &mut Section<'a>, key: &'a str, seed: &mut crate::rng::Seed) -> Result<()> {
    let mut value = seed.value();
    if s.get(key).is_some() {
        s.int(key, &mut value)?;
        *seed = crate::rng::Seed::Fixed(value);
    }
    Ok(())
}

fn read_idle<'a>(s: &mut Section<'a>, key: &'a str) -> Result<Option<IdlePolicy>> {
    Ok(match s.string(key)? {
        None => None,
        Some("spin") => Some(IdlePolicy::BusySpin),
        Some("spin-then-yield") => Some(IdlePolicy::SpinThenYield { spins: 1_000 }),
        Some("backoff") => Some(IdlePolicy::TEST),
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: format!("\"{other}\""),
                allowed: "\"spin\", \"spin-then-yield\" or \"backoff\"",
            })
        }
    })
}

fn read_ipc(mut s: Section<'_>) -> Result<IpcConfig> {
    let mut c = IpcConfig::default();
    if let Some(dir) = s.string("dir")? {
        c.dir = PathBuf::from(dir);
    }
    s.int("command_capacity", &mut c.command_capacity)?;
    s.int("event_capacity", &mut c.event_capacity)?;
    s.duration("strategy_timeout_ns", &mut c.strategy_timeout_ns)?;
    s.bool("cancel_on_strategy_loss", &mut c.cancel_on_strategy_loss)?;
    s.duration(
        "restored_attach_timeout_ns",
        &mut c.restored_attach_timeout_ns,
    )?;
    s.int("market_data_trades", &mut c.market_data_trades)?;
    for (key, value) in [
        ("command_capacity", c.command_capacity),
        ("event_capacity", c.event_capacity),
        ("market_data_trades", c.market_data_trades),
    ] {
        if !value.is_power_of_two() || !(2..=crate::ipc::CAPACITY_MAX).contains(&value) {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: value.to_string(),
                allowed: "a power of two in 2..=1048576",
            });
        }
    }
    if c.restored_attach_timeout_ns == 0 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("restored_attach_timeout_ns"),
            value: "0".into(),
            allowed: ">= 1",
        });
    }
    if c.strategy_timeout_ns == 0 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("strategy_timeout_ns"),
            value: "0".into(),
            allowed: ">= 1",
        });
    }
    s.finish()?;
    Ok(c)
}

fn read_wire_log(mut s: Section<'_>) -> Result<crate::wirelog::WireLogConfig> {
    let mut c = crate::wirelog::WireLogConfig::default();
    let dir = s.required_string("dir")?;
    if dir.is_empty() {
        return Err(FileConfigError::OutOfRange {
            key: s.key("dir"),
            value: "\"\"".into(),
            allowed: "a directory",
        });
    }
    c.dir = PathBuf::from(dir);
    s.int("ring_bytes", &mut c.ring_bytes)?;
    s.int("file_bytes_max", &mut c.file_bytes_max)?;
    if !(4_096..=1 << 30).contains(&c.ring_bytes) {
        return Err(FileConfigError::OutOfRange {
            key: s.key("ring_bytes"),
            value: c.ring_bytes.to_string(),
            allowed: "4096..=1073741824",
        });
    }
    if c.file_bytes_max < 1 << 20 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("file_bytes_max"),
            value: c.file_bytes_max.to_string(),
            allowed: ">= 1048576",
        });
    }
    s.finish()?;
    Ok(c)
}

fn read_metrics(mut s: Section<'_>) -> Result<crate::engine::MetricsConfig> {
    let mut c = crate::engine::MetricsConfig::default();
    s.bool("enabled", &mut c.enabled)?;
    if let Some(file) = s.string("file")? {
        if file.is_empty() {
            return Err(FileConfigError::OutOfRange {
                key: s.key("file"),
                value: "\"\"".into(),
                allowed: "a file path (or enabled = false)",
            });
        }
        c.file = Some(PathBuf::from(file));
    }
    if let Some(addr) = s.string("http")? {
        c.http = Some(addr.parse().map_err(|_| FileConfigError::WrongType {
            key: s.key("http"),
            value: format!("{addr:?}"),
            expected: "an address and port, e.g. \"127.0.0.1:9464\"",
        })?);
    }
    s.finish()?;
    Ok(c)
}

fn read_alerts(mut s: Section<'_>) -> Result<crate::monitor::alerts::AlertsConfig> {
    let mut c = crate::monitor::alerts::AlertsConfig::default();
    s.bool("enabled", &mut c.enabled)?;
    s.duration("breaker_open_ns", &mut c.breaker_open_ns)?;
    s.int("failure_rate_pct", &mut c.failure_rate_pct)?;
    s.duration("failure_rate_for_ns", &mut c.failure_rate_for_ns)?;
    s.int("reconnects_per_hour", &mut c.reconnects_per_hour)?;
    s.int("p99_baseline_factor", &mut c.p99_baseline_factor)?;
    s.duration("p99_window_ns", &mut c.p99_window_ns)?;
    s.duration("p99_baseline_ns", &mut c.p99_baseline_ns)?;
    s.int("p99_samples_min", &mut c.p99_samples_min)?;
    s.duration("loop_stall_ns", &mut c.loop_stall_ns)?;
    s.duration("link_down_ns", &mut c.link_down_ns)?;
    s.duration("unknown_orders_for_ns", &mut c.unknown_orders_for_ns)?;
    let checks: [(&str, u64, bool, &'static str); 7] = [
        (
            "failure_rate_pct",
            c.failure_rate_pct.into(),
            (1..=100).contains(&c.failure_rate_pct),
            "1..=100",
        ),
        (
            "p99_baseline_factor",
            c.p99_baseline_factor.into(),
            (1..=1_000).contains(&c.p99_baseline_factor),
            "1..=1000",
        ),
        (
            "p99_window_ns",
            c.p99_window_ns,
            c.p99_window_ns >= 1_000_000_000,
            ">= 1s",
        ),
        (
            "p99_samples_min",
            c.p99_samples_min,
            c.p99_samples_min >= 1,
            ">= 1",
        ),
        (
            // Two readings of the side thread (every 250 ms) at least; an hour at most.
            "loop_stall_ns",
            c.loop_stall_ns,
            (500_000_000..=3_600_000_000_000).contains(&c.loop_stall_ns),
            "500ms..=1h",
        ),
        (
            "link_down_ns",
            c.link_down_ns,
            (1_000_000_000..=86_400_000_000_000).contains(&c.link_down_ns),
            "1s..=24h",
        ),
        (
            "unknown_orders_for_ns",
            c.unknown_orders_for_ns,
            c.unknown_orders_for_ns <= 86_400_000_000_000,
            "0..=24h",
        ),
    ];
    for (key, value, ok, allowed) in checks {
        if !ok {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: value.to_string(),
                allowed,
            });
        }
    }
    s.finish()?;
    Ok(c)
}

fn read_budget(mut s: Section<'_>) -> Result<crate::monitor::alerts::BudgetConfig> {
    let mut c = crate::monitor::alerts::BudgetConfig::default();
    s.duration("decision_p99_ns", &mut c.decision_p99_ns)?;
    s.duration("new_ack_p99_ns", &mut c.new_ack_p99_ns)?;
    s.duration("e2e_p99_ns", &mut c.e2e_p99_ns)?;
    s.duration("cancel_ack_p99_ns", &mut c.cancel_ack_p99_ns)?;
    s.finish()?;
    Ok(c)
}

fn read_control(
    mut s: Section<'_>,
    symbols: &[[u8; 8]],
) -> Result<crate::monitor::control::ControlConfig> {
    let mut c = crate::monitor::control::ControlConfig::default();
    s.bool("enabled", &mut c.enabled)?;
    s.duration("interval_ns", &mut c.interval_ns)?;
    s.int("rate_min_permille", &mut c.rate_min_permille)?;
    s.int("decrease_permille", &mut c.decrease_permille)?;
    s.int("increase_permille", &mut c.increase_permille)?;
    s.duration("hold_ns", &mut c.hold_ns)?;
    s.duration("ack_p99_ns", &mut c.ack_p99_ns)?;
    s.int("ack_samples_min", &mut c.ack_samples_min)?;
    s.int("shed_below_permille", &mut c.shed_below_permille)?;
    for v in s.array("core_symbols")? {
        let known = |name: &str| {
            symbols
                .iter()
                .any(|sym| String::from_utf8_lossy(sym).trim_end() == name)
        };
        match v {
            Value::String(name) if known(name) => c.core_symbols.push(name.clone()),
            other => {
                return Err(s.wrong(
                    "core_symbols",
                    other,
                    "names from the top-level symbols list",
                ))
            }
        }
    }
    if let Err(e) = c.validate() {
        return Err(FileConfigError::OutOfRange {
            key: s.key(e.key),
            value: e.value.to_string(),
            allowed: e.allowed,
        });
    }
    s.finish()?;
    Ok(c)
}

fn read_operator(mut s: Section<'_>) -> Result<crate::engine::OperatorConfig> {
    let mut c = crate::engine::OperatorConfig::default();
    if let Some(path) = s.string("admin_socket")? {
        // A Unix socket path longer than the kernel's sun_path (108 bytes) cannot be bound.
        if path.is_empty() || path.len() > 107 {
            return Err(FileConfigError::OutOfRange {
                key: s.key("admin_socket"),
                value: format!("{path:?}"),
                allowed: "a path of 1 to 107 bytes (a Unix socket's limit)",
            });
        }
        c.admin_socket = Some(PathBuf::from(path));
    }
    s.bool("cancel_on_stop", &mut c.cancel_on_stop)?;
    s.duration("stop_timeout_ns", &mut c.stop_timeout_ns)?;
    if c.stop_timeout_ns > 600_000_000_000 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("stop_timeout_ns"),
            value: c.stop_timeout_ns.to_string(),
            allowed: "0..=600000000000 (10 minutes)",
        });
    }
    s.finish()?;
    Ok(c)
}

/// A quota's fields, over what `q` holds.
fn read_quota_fields(
    s: &mut Section<'_>,
    q: &mut crate::dispatch::quota::StrategyQuota,
) -> Result<()> {
    s.int("new_per_sec", &mut q.new_per_sec)?;
    s.int("new_burst", &mut q.new_burst)?;
    s.int("in_flight_max", &mut q.in_flight_max)?;
    q.validate().map_err(|e| quota_error(s, e))
}

fn quota_error(s: &Section<'_>, e: crate::dispatch::quota::QuotaError) -> FileConfigError {
    use crate::dispatch::quota::QuotaError;
    let (name, value, allowed) = match e {
        QuotaError::Rate(v) => ("new_per_sec", v, "0..=10000000 (0: no limit)"),
        QuotaError::Burst(v) => ("new_burst", v, "1..=10000000 when new_per_sec is set"),
        QuotaError::Strategy(id, _) => (
            "id",
            u32::from(id),
            "a configured strategy (below dispatcher.strategies)",
        ),
    };
    FileConfigError::OutOfRange {
        key: s.key(name),
        value: value.to_string(),
        allowed,
    }
}

/// `[dispatcher.quota]` (every strategy's default) and `[[dispatcher.quota.strategy]]`
/// (one strategy's own, starting from the default; each strategy at most once).
fn read_quotas(
    t: &Table,
    d: &mut DispatcherConfig,
    own: &mut Vec<(
        crate::order::StrategyId,
        crate::dispatch::quota::StrategyQuota,
    )>,
) -> Result<()> {
    let mut q = Section::new("dispatcher.quota", t);
    read_quota_fields(&mut q, &mut d.quota)?;
    for (i, v) in q.array("strategy")?.iter().enumerate() {
        let prefix = format!("dispatcher.quota.strategy[{i}]");
        let Value::Table(t) = v else {
            return Err(FileConfigError::WrongType {
                key: prefix,
                value: v.to_string(),
                expected: "a table ([[dispatcher.quota.strategy]])",
            });
        };
        if !t.contains_key("id") {
            return Err(FileConfigError::Missing(format!("{prefix}.id")));
        }
        let mut s = Section::new(&prefix, t);
        let mut id = u16::MAX;
        s.int("id", &mut id)?;
        if id >= d.strategies {
            return Err(quota_error(
                &s,
                crate::dispatch::quota::QuotaError::Strategy(id, d.strategies),
            ));
        }
        let strategy = crate::order::StrategyId(id);
        if own.iter().any(|(other, _)| *other == strategy) {
            return Err(FileConfigError::OutOfRange {
                key: s.key("id"),
                value: id.to_string(),
                allowed: "a strategy not given a quota already",
            });
        }
        let mut quota = d.quota;
        read_quota_fields(&mut s, &mut quota)?;
        s.finish()?;
        own.push((strategy, quota));
    }
    q.finish()
}

fn read_dispatcher<'a>(
    mut s: Section<'a>,
    d: &mut DispatcherConfig,
    own_quotas: &mut Vec<(
        crate::order::StrategyId,
        crate::dispatch::quota::StrategyQuota,
    )>,
) -> Result<()> {
    s.int("strategies", &mut d.strategies)?;
    s.int("orders_max", &mut d.orders_max)?;
    s.int("lane_cancel_capacity", &mut d.lane_cancel_capacity)?;
    s.int("lane_replace_capacity", &mut d.lane_replace_capacity)?;
    s.int("lane_new_capacity", &mut d.lane_new_capacity)?;
    s.int("lane_new_per_symbol_max", &mut d.lane_new_per_symbol_max)?;
    s.int("shed_high_pct", &mut d.shed_high_pct)?;
    s.int("shed_low_pct", &mut d.shed_low_pct)?;
    s.duration("acquire_timeout_ns", &mut d.acquire_timeout_ns)?;
    s.int("commands_per_poll_max", &mut d.commands_per_poll_max)?;
    s.int("outcomes_per_poll_max", &mut d.outcomes_per_poll_max)?;
    s.int("sends_per_poll_max", &mut d.sends_per_poll_max)?;
    if let Some(t) = s.subtable("quota")? {
        read_quotas(t, d, own_quotas)?;
    }
    if let Some(t) = s.subtable("risk")? {
        let mut r = Section::new("dispatcher.risk", t);
        r.int("order_qty_max", &mut d.risk.order_qty_max)?;
        r.int("order_notional_max", &mut d.risk.order_notional_max)?;
        r.int("position_max", &mut d.risk.position_max)?;
        r.bool("unknown_gate", &mut d.risk.unknown_gate)?;
        r.int("price_max", &mut d.risk.price_max)?;
        r.int("price_collar_bps", &mut d.risk.price_collar_bps)?;
        if d.risk.price_max <= 0 {
            return Err(FileConfigError::OutOfRange {
                key: "dispatcher.risk.price_max".into(),
                value: d.risk.price_max.to_string(),
                allowed: ">= 1",
            });
        }
        r.finish()?;
    }
    if let Some(t) = s.subtable("bulkhead")? {
        let mut b = Section::new("dispatcher.bulkhead", t);
        b.int(
            "in_flight_per_symbol_max",
            &mut d.bulkhead.in_flight_per_symbol_max,
        )?;
        b.int(
            "in_flight_per_venue_max",
            &mut d.bulkhead.in_flight_per_venue_max,
        )?;
        b.finish()?;
    }
    if let Some(t) = s.subtable("breaker")? {
        let mut b = Section::new("dispatcher.breaker", t);
        let c = &mut d.breaker;
        b.duration("window_ns", &mut c.window_ns)?;
        b.int("window_buckets", &mut c.window_buckets)?;
        b.int("calls_min", &mut c.calls_min)?;
        b.int(
            "failure_rate_threshold_pct",
            &mut c.failure_rate_threshold_pct,
        )?;
        b.duration("slow_call_duration_ns", &mut c.slow_call_duration_ns)?;
        b.int(
            "slow_call_rate_threshold_pct",
            &mut c.slow_call_rate_threshold_pct,
        )?;
        b.duration("open_duration_ns", &mut c.open_duration_ns)?;
        b.int("open_duration_multiplier", &mut c.open_duration_multiplier)?;
        b.duration("open_duration_max_ns", &mut c.open_duration_max_ns)?;
        b.int("half_open_probes", &mut c.half_open_probes)?;
        b.duration("half_open_wait_max_ns", &mut c.half_open_wait_max_ns)?;
        if let Some(name) = b.string("probe_judge")? {
            c.probe_judge =
                crate::guard::breaker::ProbeJudge::from_name(name).ok_or_else(|| {
                    FileConfigError::OutOfRange {
                        key: b.key("probe_judge"),
                        value: format!("\"{name}\""),
                        allowed: "\"any-failure\" or \"rate\"",
                    }
                })?;
        }
        b.finish()?;
    }
    if let Some(t) = s.subtable("limiter")? {
        let mut l = Section::new("dispatcher.limiter", t);
        let c = &mut d.limiter;
        l.int("cancel_reserve_permille", &mut c.cancel_reserve_permille)?;
        l.int("reduce_reserve_permille", &mut c.reduce_reserve_permille)?;
        l.int("throttle_rate_permille", &mut c.throttle_rate_permille)?;
        l.duration("throttle_cooldown_ns", &mut c.throttle_cooldown_ns)?;
        l.duration("throttle_recovery_ns", &mut c.throttle_recovery_ns)?;
        l.int("weight_new", &mut c.weights.new)?;
        l.int("weight_cancel", &mut c.weights.cancel)?;
        l.int("weight_replace", &mut c.weights.replace)?;
        l.int("weight_query", &mut c.weights.query)?;
        let windows = l.array("window")?;
        if !windows.is_empty() {
            if windows.len() > c.windows.len() {
                return Err(FileConfigError::OutOfRange {
                    key: "dispatcher.limiter.window".into(),
                    value: windows.len().to_string(),
                    allowed: "1 to 4 windows",
                });
            }
            c.windows = [None; 4];
            for (i, w) in windows.iter().enumerate() {
                let prefix = format!("dispatcher.limiter.window[{i}]");
                let Value::Table(t) = w else {
                    return Err(FileConfigError::WrongType {
                        key: prefix,
                        value: w.to_string(),
                        expected: "a table",
                    });
                };
                let mut ws = Section::new(&prefix, t);
                let mut limit = WindowLimit {
                    window_ns: 0,
                    limit_weight: 0,
                    burst_weight: 0,
                };
                ws.duration("window_ns", &mut limit.window_ns)?;
                ws.int("limit_weight", &mut limit.limit_weight)?;
                ws.int("burst_weight", &mut limit.burst_weight)?;
                ws.finish()?;
                c.windows[i] = Some(limit);
            }
        }
        l.finish()?;
    }
    s.finish()
}

fn read_journal(mut s: Section<'_>) -> Result<JournalConfig> {
    let dir = PathBuf::from(s.required_string("dir")?);
    let mut file_bytes: u64 = 64 << 20;
    s.int("file_bytes", &mut file_bytes)?;
    if file_bytes % RECORD_LEN as u64 != 0 || file_bytes < 3 * RECORD_LEN as u64 {
        return Err(FileConfigError::OutOfRange {
            key: "journal.file_bytes".into(),
            value: file_bytes.to_string(),
            allowed: "a multiple of 64, at least 192",
        });
    }
    s.finish()?;
    Ok(JournalConfig { dir, file_bytes })
}

fn read_venue(mut s: Section<'_>) -> Result<VenueLinkConfig> {
    let name = s.required_string("name")?.to_string();
    let address_text = s.required_string("address")?;
    let address = address_text
        .parse()
        .map_err(|_| FileConfigError::WrongType {
            key: s.key("address"),
            value: format!("\"{address_text}\""),
            expected: "an IP address and port, e.g. \"127.0.0.1:15000\"",
        })?;
    let username = s.required_string("username")?.to_string();
    let password = s.required_string("password")?.to_string();
    // The protocol's own keys, and what its wire allows of the login keys (the registry
    // dispatches to the protocol's `config.rs`).
    let protocol_name = s.string("protocol")?;
    let protocol =
        crate::session::registry::read_protocol(protocol_name, &mut s, &username, &password)?;
    let mut ack_timeout_ns: u64 = 2_000_000_000;
    let mut orders_max: u32 = 65_536;
    let mut link = LinkConfig::default();
    s.duration("ack_timeout_ns", &mut ack_timeout_ns)?;
    s.int("orders_max", &mut orders_max)?;
    s.duration("heartbeat_interval_ns", &mut link.heartbeat_interval_ns)?;
    s.int("silent_intervals_max", &mut link.silent_intervals_max)?;
    s.int("max_packet_len", &mut link.max_packet_len)?;
    s.duration(
        "reconcile_timeout_ns",
        &mut link.session.reconcile_timeout_ns,
    )?;
    read_seed(&mut s, "jitter_seed", &mut link.session.jitter_seed)?;
    s.duration("backoff_base_ns", &mut link.session.backoff.base_ns)?;
    s.duration("backoff_cap_ns", &mut link.session.backoff.cap_ns)?;
    s.int(
        "backoff_attempts_max",
        &mut link.session.backoff.attempts_max,
    )?;
    let positive: [(&str, u64); 5] = [
        ("ack_timeout_ns", ack_timeout_ns),
        ("orders_max", orders_max.into()),
        ("heartbeat_interval_ns", link.heartbeat_interval_ns),
        ("silent_intervals_max", link.silent_intervals_max.into()),
        ("backoff_base_ns", link.session.backoff.base_ns),
    ];
    for (key, value) in positive {
        if value == 0 {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: "0".into(),
                allowed: ">= 1",
            });
        }
    }
    // A packet and its 2-byte length must fit the transport's receive buffer, and the session's
    // own messages (login, order status, reconciliation answers) must fit the packet.
    let packet_max = LINK_RECV_BUFFER_BYTES - 2;
    if !(PACKET_LEN_MIN..=packet_max).contains(&usize::from(link.max_packet_len)) {
        return Err(FileConfigError::OutOfRange {
            key: s.key("max_packet_len"),
            value: link.max_packet_len.to_string(),
            allowed: "256 to 65534 (the 64 KiB receive buffer less the length field)",
        });
    }
    if orders_max > 1 << 30 {
        return Err(FileConfigError::OutOfRange {
            key: s.key("orders_max"),
            value: orders_max.to_string(),
            allowed: "1..=2^30",
        });
    }
    if link.session.backoff.cap_ns < link.session.backoff.base_ns {
        return Err(FileConfigError::OutOfRange {
            key: s.key("backoff_cap_ns"),
            value: link.session.backoff.cap_ns.to_string(),
            allowed: ">= backoff_base_ns",
        });
    }
    s.finish()?;
    Ok(VenueLinkConfig {
        name,
        address,
        username,
        password,
        protocol,
        ack_timeout_ns,
        orders_max,
        link,
    })
}
