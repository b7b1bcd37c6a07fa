//! Symbols and venues cross the IPC boundary by name. A command carries a symbol and a venue
//! as indices into the engine's configuration (`symbols`, `[[venue]]`, in file order); the
//! header carries those lists by name and a fingerprint of them, so that a strategy resolves
//! names to indices from the engine it talks to, and a strategy built against another table
//! declares its fingerprint and is refused (the channel is declared broken, code 5) instead of
//! trading the wrong symbol.
//!
//! Layout (engine-written, at every engine start, before the header says `running`):
//! word 512 the configuration fingerprint; word 1024 the counts (bits 0–15 symbols
//! configured, 16–31 symbols listed, 32–47 venues configured, 48–63 venues listed); from
//! byte 1032 one 8-byte word per listed symbol (its name, space padded), then two words
//! (16 bytes, space padded, longer names cut) per listed venue, up to the header's end. The
//! strategy writes its own fingerprint at word 144 (0: none declared).

use std::sync::atomic::Ordering;

use super::{offset, Channel, ChannelFault, IpcError, HEADER_LEN};
use crate::order::{SymbolId, VenueId};

/// Bytes of a venue name kept in the header.
pub const VENUE_NAME_LEN: usize = 16;

/// The fingerprint of a symbol and venue table: FNV-1a (64-bit) over each symbol name
/// (trailing spaces trimmed) followed by a 0 byte, a 1 byte, then each venue name followed by a
/// 0 byte. Never 0 (0 means "none declared").
pub fn fingerprint<S: AsRef<[u8]>, V: AsRef<[u8]>>(symbols: &[S], venues: &[V]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for s in symbols {
        eat(trim(s.as_ref()));
        eat(&[0]);
    }
    eat(&[1]);
    for v in venues {
        eat(v.as_ref());
        eat(&[0]);
    }
    h.max(1)
}

fn trim(name: &[u8]) -> &[u8] {
    let end = name.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &name[..end]
}

/// Words available for names after the counts.
const NAME_WORDS: usize = (HEADER_LEN - offset::NAMES) / 8;

impl Channel {
    /// Engine: publishes the configuration's symbols and venues by name, and their
    /// fingerprint (as many names as the header holds; the fingerprint covers all).
    pub fn publish_names<S: AsRef<[u8]>, V: AsRef<[u8]>>(&self, symbols: &[S], venues: &[V]) {
        let fp = fingerprint(symbols, venues);
        let listed_symbols = symbols.len().min(NAME_WORDS);
        let listed_venues = venues.len().min((NAME_WORDS - listed_symbols) / 2);
        for (i, s) in symbols.iter().take(listed_symbols).enumerate() {
            let mut w = [b' '; 8];
            let name = trim(s.as_ref());
            let n = name.len().min(8);
            w[..n].copy_from_slice(&name[..n]);
            self.word(offset::NAMES + i * 8)
                .store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        for (i, v) in venues.iter().take(listed_venues).enumerate() {
            let mut w = [b' '; VENUE_NAME_LEN];
            let name = v.as_ref();
            let n = name.len().min(VENUE_NAME_LEN);
            w[..n].copy_from_slice(&name[..n]);
            let at = offset::NAMES + (listed_symbols + 2 * i) * 8;
            for half in 0..2 {
                let bytes: [u8; 8] = w[half * 8..half * 8 + 8].try_into().expect("8");
                self.word(at + half * 8)
                    .store(u64::from_le_bytes(bytes), Ordering::Relaxed);
            }
        }
        let counts = clamp16(symbols.len())
            | clamp16(listed_symbols) << 16
            | clamp16(venues.len()) << 32
            | clamp16(listed_venues) << 48;
        self.word(offset::NAME_COUNTS)
            .store(counts, Ordering::Relaxed);
        self.word(offset::CONFIG_FINGERPRINT)
            .store(fp, Ordering::Release);
    }

    /// The fingerprint of the engine's symbol and venue table (0: no engine published one).
    pub fn config_fingerprint(&self) -> u64 {
        self.word(offset::CONFIG_FINGERPRINT)
            .load(Ordering::Acquire)
    }

    /// The engine's symbols, by index, as published (trailing spaces trimmed).
    pub fn symbol_names(&self) -> Vec<String> {
        let counts = self.word(offset::NAME_COUNTS).load(Ordering::Acquire);
        let listed = ((counts >> 16) & 0xFFFF) as usize;
        (0..listed.min(NAME_WORDS))
            .map(|i| {
                let w = self
                    .word(offset::NAMES + i * 8)
                    .load(Ordering::Relaxed)
                    .to_le_bytes();
                String::from_utf8_lossy(trim(&w)).into_owned()
            })
            .collect()
    }

    /// The engine's venues, by index, as published (at most [`VENUE_NAME_LEN`] bytes each).
    pub fn venue_names(&self) -> Vec<String> {
        let counts = self.word(offset::NAME_COUNTS).load(Ordering::Acquire);
        let symbols = ((counts >> 16) & 0xFFFF) as usize;
        let listed = (counts >> 48) as usize;
        (0..listed.min(NAME_WORDS.saturating_sub(symbols) / 2))
            .map(|i| {
                let at = offset::NAMES + (symbols + 2 * i) * 8;
                let mut w = [0u8; VENUE_NAME_LEN];
                for half in 0..2 {
                    let word = self.word(at + half * 8).load(Ordering::Relaxed);
                    w[half * 8..half * 8 + 8].copy_from_slice(&word.to_le_bytes());
                }
                String::from_utf8_lossy(trim(&w)).into_owned()
            })
            .collect()
    }

    /// The index of symbol `name` in the engine's table, if listed.
    pub fn symbol_id(&self, name: &str) -> Option<SymbolId> {
        let i = self.symbol_names().iter().position(|s| s == name)?;
        Some(SymbolId(i as u16))
    }

    /// The index of venue `name` in the engine's table, if listed.
    pub fn venue_id(&self, name: &str) -> Option<VenueId> {
        let i = self.venue_names().iter().position(|v| v == name)?;
        Some(VenueId(i as u16))
    }

    /// Strategy: declares the symbol and venue table this strategy was built for (by index,
    /// in order). From then on the engine refuses the channel (declares it broken, code 5:
    /// no command of it is acted on, its orders are canceled as on loss) unless its own
    /// table is the same — also an engine that starts later. Refused here at once when the
    /// engine's published table differs, naming both.
    pub fn declare_table<S: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        symbols: &[S],
        venues: &[V],
    ) -> Result<(), IpcError> {
        let ours = fingerprint(symbols, venues);
        self.word(offset::DECLARED_FINGERPRINT)
            .store(ours, Ordering::Release);
        let engine = self.config_fingerprint();
        if engine != 0 && engine != ours {
            let list = |names: &mut dyn Iterator<Item = String>| names.collect::<Vec<_>>();
            return Err(IpcError::TableMismatch {
                path: self.path().to_path_buf(),
                ours: list(
                    &mut symbols
                        .iter()
                        .map(|s| String::from_utf8_lossy(trim(s.as_ref())).into_owned()),
                ),
                engine: self.symbol_names(),
                ours_fingerprint: ours,
                engine_fingerprint: engine,
            });
        }
        Ok(())
    }

    /// Engine: the strategy's declared table fingerprint against this engine's; a mismatch
    /// is a channel fault (found: the strategy's, limit: the engine's).
    pub(crate) fn check_declared_table(&self) {
        let declared = self
            .word(offset::DECLARED_FINGERPRINT)
            .load(Ordering::Acquire);
        if declared == 0 || self.fault.get().is_some() {
            return;
        }
        let engine = self.config_fingerprint();
        if declared != engine {
            self.fault
                .set(Some(ChannelFault::TableMismatch { declared, engine }));
        }
    }
}

fn clamp16(n: usize) -> u64 {
    n.min(0xFFFF) as u64
}
