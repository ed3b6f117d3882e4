//! What every layer uses: the error type, input validation, the waiting back-off, the
//! lost signal, the names of the strategies, the metrics, and futures run side by
//! side. Nothing here knows a database.

pub(crate) mod backoff;
pub(crate) mod error;
pub(crate) mod join;
pub(crate) mod lost;
pub(crate) mod metrics;
pub(crate) mod strategy_kind;
pub(crate) mod validate;
