//! Eyes on the execution chain: latency histograms and the counters file (shared memory,
//! written by the loops, read by `keel stat`, `/metrics` and any other process).

pub mod engine;
pub mod file;
pub mod histogram;

pub use file::{
    CountersError, CountersFile, CountersReader, Descriptor, Layout, MetricKind, RegionWriter,
    Slot, Snapshot, Value,
};
pub use histogram::Histogram;
