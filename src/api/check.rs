//! The checks sqlock makes of a caller's input before it sends any SQL, for a caller
//! that wants to refuse bad input sooner: a command-line tool before it connects, a
//! service at its edge. Each is the very check the library makes, with the error it
//! gives.

use std::time::Duration;

use crate::support::error::Result;
use crate::support::validate;

/// A key as any lock takes it: 1 to [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) bytes of
/// UTF-8 without NUL ([`Error::EmptyKey`](crate::Error::EmptyKey),
/// [`Error::KeyTooLong`](crate::Error::KeyTooLong),
/// [`Error::KeyContainsNul`](crate::Error::KeyContainsNul)). A plain lock refuses the
/// key shapes kept for semaphores' permits and read-write locks' holds too
/// ([`lock_key`]).
///
/// ```
/// assert!(sqlock::check::key("nightly-report").is_ok());
/// assert!(matches!(sqlock::check::key(""), Err(sqlock::Error::EmptyKey)));
/// ```
pub fn key(key: &str) -> Result<()> {
    validate::key(key)
}

/// A plain lock's key ([`Locker::acquire`](crate::Locker::acquire)): a [`key`], and
/// not of the shapes kept for other primitives' holds
/// ([`Error::ReservedKey`](crate::Error::ReservedKey),
/// [`Error::ReservedMarker`](crate::Error::ReservedMarker)).
///
/// ```
/// assert!(sqlock::check::lock_key("semaphore:x#0").is_err());
/// ```
pub fn lock_key(key: &str) -> Result<()> {
    validate::lock_key(key)
}

/// An election's name ([`Locker::election`](crate::Locker::election)): its lock key,
/// `election:` and the name, must be a [`lock_key`].
///
/// ```
/// let long = "n".repeat(sqlock::MAX_ELECTION_NAME_BYTES + 1);
/// assert!(sqlock::check::election_name(&long).is_err());
/// ```
pub fn election_name(name: &str) -> Result<()> {
    validate::election_key(name).map(drop)
}

/// A semaphore's name and its number of permits
/// ([`Locker::semaphore`](crate::Locker::semaphore)): the name at most
/// [`MAX_SEMAPHORE_NAME_BYTES`](crate::MAX_SEMAPHORE_NAME_BYTES), 1 to
/// [`MAX_PERMITS`](crate::MAX_PERMITS) permits.
///
/// ```
/// assert!(sqlock::check::semaphore("exports", 4).is_ok());
/// assert!(sqlock::check::semaphore("exports", 0).is_err());
/// ```
pub fn semaphore(name: &str, permits: u32) -> Result<()> {
    validate::semaphore(name, permits).map(drop)
}

/// A leader's identity ([`Election::identity`](crate::Election::identity)): 1 to
/// [`MAX_IDENTITY_BYTES`](crate::MAX_IDENTITY_BYTES) bytes, no NUL
/// ([`Error::InvalidIdentity`](crate::Error::InvalidIdentity)).
///
/// ```
/// assert!(sqlock::check::identity("host-1:4242").is_ok());
/// assert!(sqlock::check::identity("").is_err());
/// ```
pub fn identity(id: &str) -> Result<()> {
    validate::identity(id)
}

/// A TTL: [`MIN_TTL`](crate::MIN_TTL) to [`MAX_TTL`](crate::MAX_TTL)
/// ([`Error::TtlTooShort`](crate::Error::TtlTooShort),
/// [`Error::TtlTooLong`](crate::Error::TtlTooLong)).
///
/// ```
/// use std::time::Duration;
///
/// assert!(sqlock::check::ttl(Duration::from_secs(30)).is_ok());
/// assert!(sqlock::check::ttl(Duration::from_millis(1)).is_err());
/// ```
pub fn ttl(ttl: Duration) -> Result<()> {
    validate::ttl(ttl).map(drop)
}
