//! What every layer uses: the error type, input validation, the waiting back-off, the
//! lost signal, and the names of the strategies. Nothing here knows a database.

pub(crate) mod backoff;
pub(crate) mod error;
pub(crate) mod lost;
pub(crate) mod strategy_kind;
pub(crate) mod validate;
