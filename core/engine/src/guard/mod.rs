//! The guards a new order passes, each a sans-IO type that takes `now_ns` and never allocates
//! after start-up: load shedding, pre-trade risk, bulkheads, the circuit breaker and the rate
//! limiter, plus the backoff used for reconnects. [`chain::GuardChain`] runs them in order.
//! docs/architecture.md explains each guard's parameters, defaults and why the order is what
//! it is.

pub mod backoff;
pub mod breaker;
pub mod bulkhead;
pub mod chain;
pub mod limiter;
pub mod risk;
pub mod shed;
