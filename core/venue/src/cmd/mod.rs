//! The simulator's commands: `keel venue` (the simulated exchange alone, with its control
//! port) and `keel gateway` (a market-data gateway on the NATS bus). The `keel` binary lists
//! them when built with its `simulator` feature.

pub mod gateway;
pub mod venue;
