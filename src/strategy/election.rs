//! The election's claim of a term: a candidate granted the election's lease becomes
//! the leader only once it has recorded its identity for the lease's term
//! (`elect_claim.sql`), in a statement that succeeds only while the lease is still its
//! own. A lease lost before that is no leadership.

use crate::db::retry::retry_contention;
use crate::db::values::Claim;
use crate::support::error::Result;

use super::handle::Handle;
use super::LockId;

/// Records `identity` as the leader of the term `id` was granted: `false` when the
/// lease was no longer this handle's, so no term was recorded.
///
/// Retried while the row is contended for a moment. One statement: a claim cut off
/// recorded the term or did not, never half of it.
pub(crate) async fn claim_term(handle: &Handle, id: &LockId, identity: &str) -> Result<bool> {
    let claim = Claim {
        held: id.held(&handle.owner_text),
        identity,
    };
    retry_contention(|| handle.db.elect_claim(&claim)).await
}
