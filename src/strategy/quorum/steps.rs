//! The quorum lock's steps on one database, written once over every server: the
//! highest quorum token it saw granted for a key, and the token raised where the
//! holder's lease is still its own.

use crate::db::backend::Backend;
use crate::db::runner::{ints, On};
use crate::db::values::{Key, Raise};
use crate::db::{on_backend, Db, Failure};

/// The highest quorum token `b` recorded for the key, 0 for none.
async fn seen<B: Backend>(b: &B, k: &Key<'_>) -> Result<i64, sqlx::Error> {
    let seen =
        ints::<B::Db, _>(On::Pool(b.pool(), false), &b.common().family.quorum.seen, k).await?;
    Ok(seen.first().copied().unwrap_or(0))
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// The highest quorum token this database saw granted for a key (0 for none).
    pub(crate) async fn quorum_seen(&self, k: &Key<'_>) -> Result<i64, Failure> {
        on_backend!(self, |b| seen(&**b, k).await)
    }

    /// The key's quorum token raised to `r.quorum` at least, if the lease `r.held`
    /// names is still the holder's: whether it was.
    pub(crate) async fn quorum_raise(&self, r: &Raise<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b
            .matched(&b.common().family.quorum.raise, r)
            .await)
    }
}
