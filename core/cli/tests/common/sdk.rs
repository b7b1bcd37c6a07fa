//! What the strategy SDKs (sdk/c, sdk/python) are checked against: the engine's header offsets
//! by name, in one list both lockstep tests use.

use keel::ipc::offset;

/// Every header word's offset, by the name both SDKs give it.
pub const HEADER_OFFSETS: [(&str, usize); 25] = [
    ("MAGIC", offset::MAGIC),
    ("VERSION", offset::VERSION),
    ("RECORD_LEN", offset::RECORD_LEN),
    ("COMMAND_CAPACITY", offset::COMMAND_CAPACITY),
    ("EVENT_CAPACITY", offset::EVENT_CAPACITY),
    ("STRATEGY", offset::STRATEGY),
    ("ENGINE_HEARTBEAT", offset::ENGINE_HEARTBEAT),
    ("ENGINE_EPOCH", offset::ENGINE_EPOCH),
    ("ENGINE_STATE", offset::ENGINE_STATE),
    ("ID_FLOOR", offset::ID_FLOOR),
    ("VENUES_SYNCED", offset::VENUES_SYNCED),
    ("ENGINE_PID", offset::ENGINE_PID),
    ("CHANNEL_FAULT", offset::CHANNEL_FAULT),
    ("STRATEGY_HEARTBEAT", offset::STRATEGY_HEARTBEAT),
    ("STRATEGY_PID", offset::STRATEGY_PID),
    ("DECLARED_FINGERPRINT", offset::DECLARED_FINGERPRINT),
    ("COMMAND_TAIL", offset::COMMAND_TAIL),
    ("COMMAND_HEAD", offset::COMMAND_HEAD),
    ("EVENT_TAIL", offset::EVENT_TAIL),
    ("EVENT_HEAD", offset::EVENT_HEAD),
    ("FAULT_FOUND", offset::FAULT_FOUND),
    ("FAULT_LIMIT", offset::FAULT_LIMIT),
    ("CONFIG_FINGERPRINT", offset::CONFIG_FINGERPRINT),
    ("NAME_COUNTS", offset::NAME_COUNTS),
    ("NAMES", offset::NAMES),
];

/// The five commands both SDK tests send (a reduce-only IOC sell of 100 MSFT at -100.25, its
/// cancel, its replace by `id(43)`, a mass cancel of symbol 1, then of everything), as the
/// engine must read them.
pub fn sent_commands(id: impl Fn(u64) -> keel::order::ClientOrderId) -> [keel::order::Command; 5] {
    use keel::order::{
        Command, MassCancelScope, NewOrder, Price, Replace, Side, SymbolId, TimeInForce, VenueId,
    };
    [
        Command::New(NewOrder {
            id: id(42),
            venue: VenueId(0),
            symbol: SymbolId(1),
            side: Side::Sell,
            price: Price(-1_002_500),
            qty: 100,
            tif: TimeInForce::ImmediateOrCancel,
            reduce_only: true,
        }),
        Command::Cancel { id: id(42) },
        Command::Replace(Replace {
            id: id(42),
            new_id: id(43),
            qty: 7,
            price: Price(1_002_501),
        }),
        Command::MassCancel {
            scope: MassCancelScope::Symbol(SymbolId(1)),
        },
        Command::MassCancel {
            scope: MassCancelScope::Strategy,
        },
    ]
}

/// The top of book the market-data tests write for `n`: every field derived from it, so a
/// reader can tell a torn read (bid i = 10n + i, qty + 1; ask price + 2, qty + 3).
pub fn derived_top(n: u64) -> keel::feed::fanout::BookTop {
    let mut top = keel::feed::fanout::BookTop {
        seq: n,
        ..Default::default()
    };
    for i in 0..keel::feed::fanout::DEPTH {
        let b = n * 10 + i as u64;
        top.bids[i] = (b as i64, b + 1);
        top.asks[i] = (b as i64 + 2, b + 3);
    }
    top
}

/// Leaves `symbol`'s slot in the market-data file at `path` as a writer that died inside it
/// would: its version word odd.
pub fn leave_slot_mid_write(path: &std::path::Path, symbol: u16) {
    use std::os::unix::fs::FileExt;
    let at = 4_096 + u64::from(symbol) * keel::ipc::md::SLOT_LEN as u64;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&1u64.to_le_bytes(), at).unwrap();
}

/// Compiles `sources` (paths from the repository's root) with sdk/c/keel.c into `out` with
/// the system's C compiler, warnings as errors; panics naming the compiler's complaint.
pub fn build_c(out: &std::path::Path, sources: &[&str]) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = std::process::Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("sdk/c"))
        .arg("-o")
        .arg(out)
        .arg(root.join("sdk/c/keel.c"))
        .args(sources.iter().map(|s| root.join(s)))
        .output()
        .expect("a C compiler (cc)");
    assert!(
        output.status.success(),
        "{sources:?} do not compile: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
