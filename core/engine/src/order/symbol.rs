//! Symbols interned at start-up into a fixed table; the hot path carries only [`SymbolId`].

/// Bytes in a symbol name: OUCH 5.0's Symbol field is 8 bytes of space-padded alpha.
pub const SYMBOL_NAME_LEN: usize = 8;

/// A symbol name, space padded to [`SYMBOL_NAME_LEN`] bytes.
pub type SymbolName = [u8; SYMBOL_NAME_LEN];

/// Index of an interned symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SymbolId(pub u16);

/// Errors interning or looking up a symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SymbolError {
    /// The table already holds `symbols_max` names.
    #[error("symbol table full: {symbols_max} symbols configured")]
    Full {
        /// The configured bound.
        symbols_max: u32,
    },
    /// Empty, too long, or not printable ASCII without spaces.
    #[error("bad symbol name (length {len}): 1..=8 printable ASCII bytes without spaces required")]
    BadName {
        /// Length given.
        len: u32,
    },
    /// An id not issued by this table.
    #[error("unknown symbol id {id}")]
    UnknownId {
        /// The id given.
        id: u16,
    },
}

/// Fixed-capacity symbol table, filled at start-up.
#[derive(Debug, Clone)]
pub struct SymbolTable {
    names: Vec<SymbolName>,
    symbols_max: u32,
}

impl SymbolTable {
    /// An empty table that will hold at most `symbols_max` symbols.
    pub fn with_capacity(symbols_max: u16) -> Self {
        Self {
            names: Vec::with_capacity(usize::from(symbols_max)),
            symbols_max: symbols_max.into(),
        }
    }

    /// Interns `name`, returning the existing id if it is already present.
    pub fn intern(&mut self, name: &str) -> Result<SymbolId, SymbolError> {
        let bytes = name.as_bytes();
        let valid = !bytes.is_empty()
            && bytes.len() <= SYMBOL_NAME_LEN
            && bytes.iter().all(|b| b.is_ascii_graphic());
        if !valid {
            return Err(SymbolError::BadName {
                len: bytes.len() as u32,
            });
        }
        let mut padded = [b' '; SYMBOL_NAME_LEN];
        padded[..bytes.len()].copy_from_slice(bytes);
        if let Some(at) = self.names.iter().position(|n| *n == padded) {
            return Ok(SymbolId(at as u16));
        }
        if self.names.len() as u32 >= self.symbols_max {
            return Err(SymbolError::Full {
                symbols_max: self.symbols_max,
            });
        }
        self.names.push(padded);
        Ok(SymbolId((self.names.len() - 1) as u16))
    }

    /// The padded name of `id`.
    pub fn name(&self, id: SymbolId) -> Result<&SymbolName, SymbolError> {
        self.names
            .get(usize::from(id.0))
            .ok_or(SymbolError::UnknownId { id: id.0 })
    }

    /// Looks up a padded name (as decoded from the wire) without allocating.
    pub fn find(&self, padded: &SymbolName) -> Option<SymbolId> {
        self.names
            .iter()
            .position(|n| n == padded)
            .map(|at| SymbolId(at as u16))
    }

    /// Number of interned symbols.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_once_and_bounds_hold() {
        let mut table = SymbolTable::with_capacity(2);
        let a = table.intern("AAPL").unwrap();
        assert_eq!(table.intern("AAPL").unwrap(), a);
        let b = table.intern("MSFT").unwrap();
        assert_ne!(a, b);
        assert_eq!(
            table.intern("TSLA"),
            Err(SymbolError::Full { symbols_max: 2 })
        );
        assert_eq!(table.intern(""), Err(SymbolError::BadName { len: 0 }));
        assert_eq!(
            table.intern("TOOLONGNAME"),
            Err(SymbolError::BadName { len: 11 })
        );
        assert_eq!(table.name(a).unwrap(), b"AAPL    ");
        assert_eq!(table.find(b"MSFT    "), Some(b));
        assert_eq!(
            table.name(SymbolId(9)),
            Err(SymbolError::UnknownId { id: 9 })
        );
    }
}
