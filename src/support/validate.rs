//! Checks on user input, done before any SQL is sent.
//!
//! Keys and TTLs are values and are always bound as parameters; the table name is the
//! one identifier that is written into SQL text, so it is held to a strict shape.

use std::time::Duration;

use crate::support::error::{Error, Result};

/// The longest lock key, in bytes of UTF-8 (the key column is 255 bytes wide).
pub const MAX_KEY_BYTES: usize = 255;

/// The shortest TTL a lease may have: 10 ms.
///
/// A shorter lease cannot be honoured: the acquisition's own answer and each renewal
/// (every third of the TTL) take a round trip to the database, and a grant whose answer
/// arrives after its TTL has run out is given back
/// ([`Error::GrantExpired`](crate::Error::GrantExpired)). Even 10 ms is only for a
/// database on the same host; across a network, choose a TTL of seconds.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The longest TTL a lease may have: ten years of 365 days.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// The longest table name. Derived names (`<table>_fence_seq`,
/// `<table>_expires_at_idx`) must fit PostgreSQL's 63-byte identifiers.
pub const MAX_TABLE_NAME_BYTES: usize = 40;

/// The table sqlock uses unless told otherwise, the one its migrations create.
pub const DEFAULT_TABLE: &str = "sqlock_locks";

pub(crate) fn key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLong {
            len: key.len(),
            max: MAX_KEY_BYTES,
        });
    }
    if key.contains('\0') {
        return Err(Error::KeyContainsNul);
    }
    Ok(())
}

/// What an election's name is prefixed with to make its lock key: `election:`, so
/// that elections never share a key with the application's own locks (unless a lock is
/// taken on such a key on purpose).
pub(crate) const ELECTION_KEY_PREFIX: &str = "election:";

/// The longest election name, in bytes of UTF-8: its key, `election:<name>`, must
/// fit [`MAX_KEY_BYTES`].
pub const MAX_ELECTION_NAME_BYTES: usize = MAX_KEY_BYTES - ELECTION_KEY_PREFIX.len();

/// The longest leader identity, in bytes of UTF-8 (its column is 255 wide).
pub const MAX_IDENTITY_BYTES: usize = 255;

/// Checks an election's name as a key (empty, too long with its prefix, NUL) and
/// returns its lock key.
pub(crate) fn election_key(name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(Error::EmptyKey);
    }
    if name.len() > MAX_ELECTION_NAME_BYTES {
        return Err(Error::KeyTooLong {
            len: name.len(),
            max: MAX_ELECTION_NAME_BYTES,
        });
    }
    let key = format!("{ELECTION_KEY_PREFIX}{name}");
    self::key(&key)?;
    reserved(&key)?;
    Ok(key)
}

/// What the keys of a semaphore's permits start with: `semaphore:`. The permit in
/// slot `i` of the semaphore `name` is the lease on `semaphore:<name>#<i>`. Plain
/// locks are refused on these keys ([`Error::ReservedKey`]), so that no lock of
/// another kind can stand for a permit.
pub(crate) const SEMAPHORE_KEY_PREFIX: &str = "semaphore:";

/// The most permits a semaphore may have: 1000.
pub const MAX_PERMITS: u32 = 1000;

/// The longest semaphore name, in bytes of UTF-8: its permits' keys
/// (`semaphore:<name>#<slot>`, a slot number of up to three digits) must fit
/// [`MAX_KEY_BYTES`].
pub const MAX_SEMAPHORE_NAME_BYTES: usize = MAX_KEY_BYTES - SEMAPHORE_KEY_PREFIX.len() - 4;

/// What a read hold's key puts between the read-write lock's name and its owner id:
/// the read hold of `owner` of the lock `name` is the row `name@read:<owner>`.
pub(crate) const READ_MARKER: &str = "@read:";

/// What a waiting writer's intent puts between the read-write lock's name and its
/// owner id: `name@write:<owner>`.
pub(crate) const WRITE_MARKER: &str = "@write:";

/// The length of an owner id as keys carry it: a hyphenated UUID.
pub(crate) const OWNER_ID_CHARS: usize = 36;

/// Checks a plain lock's key: a key, not one of a semaphore's permits, and not one of
/// a read-write lock's own holds (see [`reserved`]).
pub(crate) fn lock_key(key: &str) -> Result<()> {
    self::key(key)?;
    reserved(key)
}

/// Refuses a name in the spaces sqlock keeps for the holds a name is held through in
/// shared mode: keys starting with [`SEMAPHORE_KEY_PREFIX`] (a semaphore's permits)
/// and keys containing [`READ_MARKER`] or [`WRITE_MARKER`] (a read-write lock's
/// reads and waiting writers). No lock, semaphore, election or read-write lock is
/// named so: the key of a hold tells, by its shape alone, which name it holds
/// ([`parent_of`]).
pub(crate) fn reserved(key: &str) -> Result<()> {
    if key.starts_with(SEMAPHORE_KEY_PREFIX) {
        return Err(Error::ReservedKey {
            key: key.to_owned(),
            prefix: SEMAPHORE_KEY_PREFIX,
        });
    }
    for marker in [READ_MARKER, WRITE_MARKER] {
        if key.contains(marker) {
            return Err(Error::ReservedMarker {
                key: key.to_owned(),
                marker,
            });
        }
    }
    Ok(())
}

/// How a name is held in shared mode: by reads of a read-write lock, or by permits of
/// a semaphore. The name's own row records it (`lock_strategy`), with no owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shared {
    Read,
    Semaphore,
}

impl Shared {
    /// The name's row's `lock_strategy` while it is held in this mode.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Semaphore => "semaphore",
        }
    }
}

/// The name a hold in shared mode holds, and how, by the shape of the hold's key: the
/// read hold `N@read:<owner>` holds `N` by reads, the permit `semaphore:N#<slot>`
/// holds `N` by permits. `None` for every other key: a name held alone (the names
/// themselves are refused in those shapes, see [`reserved`]).
///
/// The one place that tells a hold's name: its renewal, extension and release push or
/// count the name's row, bound as a value.
pub(crate) fn parent_of(key: &str) -> Option<(&str, Shared)> {
    if let Some(rest) = key.strip_prefix(SEMAPHORE_KEY_PREFIX) {
        let (name, slot) = rest.rsplit_once('#')?;
        let is_slot =
            !slot.is_empty() && slot.len() <= 3 && slot.bytes().all(|b| b.is_ascii_digit());
        return (is_slot && !name.is_empty()).then_some((name, Shared::Semaphore));
    }
    let cut = key.len().checked_sub(OWNER_ID_CHARS + READ_MARKER.len())?;
    let name = key.get(..cut)?;
    let owner = key.get(cut + READ_MARKER.len()..)?;
    let is_owner = owner.char_indices().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => c == '-',
        _ => c.is_ascii_hexdigit(),
    });
    (key[cut..].starts_with(READ_MARKER) && is_owner && !name.is_empty())
        .then_some((name, Shared::Read))
}

/// The key of `owner`'s read hold of the read-write lock `name`: the one shape
/// [`parent_of`] tells back to `name`.
pub(crate) fn read_key(name: &str, owner: &str) -> String {
    format!("{name}{READ_MARKER}{owner}")
}

/// Checks a semaphore's name (as a key: empty, too long, NUL) and its number of
/// permits, and returns the prefix of its permits' keys.
pub(crate) fn semaphore(name: &str, permits: u32) -> Result<String> {
    if name.is_empty() {
        return Err(Error::EmptyKey);
    }
    if name.len() > MAX_SEMAPHORE_NAME_BYTES {
        return Err(Error::KeyTooLong {
            len: name.len(),
            max: MAX_SEMAPHORE_NAME_BYTES,
        });
    }
    if name.contains('\0') {
        return Err(Error::KeyContainsNul);
    }
    // The semaphore holds its name as any lock does (in shared mode): a name of the
    // spaces kept for holds is refused as a lock's key is.
    reserved(name)?;
    if permits == 0 || permits > MAX_PERMITS {
        return Err(Error::InvalidPermits {
            permits,
            max: MAX_PERMITS,
        });
    }
    Ok(permit_prefix(name))
}

/// What the keys of the semaphore `name`'s permits start with: `semaphore:<name>#`
/// ([`parent_of`] tells each permit's key back to `name`).
pub(crate) fn permit_prefix(name: &str) -> String {
    format!("{SEMAPHORE_KEY_PREFIX}{name}#")
}

/// Checks how many permits an acquisition takes at once.
pub(crate) fn permit_count(count: u32, permits: u32) -> Result<()> {
    if count == 0 || count > permits {
        return Err(Error::InvalidPermitCount { count, permits });
    }
    Ok(())
}

/// Checks a leader identity.
pub(crate) fn identity(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        "it is empty".to_owned()
    } else if id.len() > MAX_IDENTITY_BYTES {
        format!(
            "it is {} bytes long, the limit is {MAX_IDENTITY_BYTES} bytes",
            id.len()
        )
    } else if id.contains('\0') {
        "it contains a NUL character".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::InvalidIdentity { reason })
}

/// Checks a TTL and returns it in whole microseconds, the unit the SQL works in.
pub(crate) fn ttl(ttl: Duration) -> Result<i64> {
    if ttl < MIN_TTL {
        return Err(Error::TtlTooShort { ttl, min: MIN_TTL });
    }
    if ttl > MAX_TTL {
        return Err(Error::TtlTooLong { ttl, max: MAX_TTL });
    }
    // Both bounds above keep this in range; the fallback only guards the arithmetic.
    Ok(i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX))
}

/// A table name that is safe to write into SQL text.
///
/// It must be 1 to [`MAX_TABLE_NAME_BYTES`] bytes of lower-case ASCII letters, digits
/// and underscores, and start with a letter or an underscore. sqlock still quotes it
/// in every statement, so reserved words such as `order` are fine.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName(String);

impl TableName {
    /// Checks `name` and wraps it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTableName`] when `name` is not of the shape above.
    ///
    /// # Examples
    ///
    /// ```
    /// use sqlock::TableName;
    ///
    /// assert!(TableName::new("job_locks").is_ok());
    /// assert!(TableName::new("Job-Locks").is_err());
    /// assert!(TableName::new("locks; DROP TABLE users").is_err());
    /// ```
    pub fn new(name: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidTableName {
            name: name.to_owned(),
            reason,
        };
        let mut bytes = name.bytes();
        match bytes.next() {
            None => return Err(invalid("it is empty")),
            Some(b) if !(b.is_ascii_lowercase() || b == b'_') => {
                return Err(invalid("it must start with a lower-case letter or '_'"))
            }
            Some(_) => {}
        }
        if name.len() > MAX_TABLE_NAME_BYTES {
            return Err(invalid("it is longer than 40 bytes"));
        }
        if !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            return Err(invalid(
                "only lower-case ASCII letters, digits and '_' are allowed",
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The PostgreSQL notification channel on which releases of this table's locks
    /// are announced (see [`LockerBuilder::notify_waiters`](crate::LockerBuilder::notify_waiters)):
    /// the table name with `_released` appended, within PostgreSQL's 63-byte limit.
    pub fn release_channel(&self) -> String {
        format!("{}_released", self.0)
    }

    /// The PostgreSQL notification channel on which the fair strategy's handoffs name
    /// the waiter (by ticket) the lock was handed to: the table name with `_granted`
    /// appended.
    pub fn grant_channel(&self) -> String {
        format!("{}_granted", self.0)
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self(DEFAULT_TABLE.to_owned())
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TableName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(matches!(key(""), Err(Error::EmptyKey)));
        assert!(key(&"k".repeat(255)).is_ok());
        assert!(matches!(
            key(&"k".repeat(256)),
            Err(Error::KeyTooLong { len: 256, .. })
        ));
        // 128 two-byte characters are 256 bytes.
        assert!(matches!(
            key(&"é".repeat(128)),
            Err(Error::KeyTooLong { .. })
        ));
        assert!(matches!(key("a\0b"), Err(Error::KeyContainsNul)));
        assert!(key("ключ/🔒").is_ok());
    }

    #[test]
    fn reserved_keys() {
        let owner = "0f5c3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f60";
        for bad in [
            "semaphore:x".to_owned(),
            format!("doc@read:{owner}"),
            "a@read:b".to_owned(),
            "a@write:".to_owned(),
        ] {
            assert!(lock_key(&bad).is_err(), "{bad}");
            assert!(semaphore(&bad, 2).is_err(), "{bad}");
            // An election's key starts with its own prefix.
            assert_eq!(election_key(&bad).is_err(), bad.contains('@'), "{bad}");
        }
        for ok in ["doc", "doc@read", "doc@x:y", "a#1", "@read", "semaphores"] {
            assert!(lock_key(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn parents() {
        let owner = "0f5c3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f60";
        let read = format!("doc@read:{owner}");
        assert_eq!(parent_of(&read), Some(("doc", Shared::Read)));
        let odd = format!("a#b:c@read:{owner}");
        assert_eq!(parent_of(&odd), Some(("a#b:c", Shared::Read)));
        assert_eq!(
            parent_of("semaphore:jobs#0"),
            Some(("jobs", Shared::Semaphore))
        );
        assert_eq!(
            parent_of("semaphore:a#b#999"),
            Some(("a#b", Shared::Semaphore))
        );
        for none in [
            "doc".to_owned(),
            format!("doc@write:{owner}"),
            format!("@read:{owner}"),
            format!("doc@read:{}", &owner[1..]),
            "doc@read:0f5c3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f6g".to_owned(),
            "semaphore:#1".to_owned(),
            "semaphore:a#".to_owned(),
            "semaphore:a#1000".to_owned(),
            "semaphore:a#x".to_owned(),
            "semaphore:a".to_owned(),
            "é@read:0f5c3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f6".to_owned(),
        ] {
            assert_eq!(parent_of(&none), None, "{none}");
        }
        // Every hold of every name made by the crate is told back to its name.
        for name in ["n", "ключ/🔒", "a@b", &"x".repeat(212)] {
            assert_eq!(
                parent_of(&format!("{name}{READ_MARKER}{owner}")),
                Some((name, Shared::Read))
            );
        }
    }

    #[test]
    fn ttls() {
        assert!(matches!(
            ttl(Duration::ZERO),
            Err(Error::TtlTooShort { .. })
        ));
        assert!(matches!(
            ttl(Duration::from_micros(9_999)),
            Err(Error::TtlTooShort { .. })
        ));
        assert_eq!(ttl(Duration::from_millis(10)).unwrap(), 10_000);
        assert_eq!(ttl(Duration::from_secs(30)).unwrap(), 30_000_000);
        assert!(matches!(ttl(Duration::MAX), Err(Error::TtlTooLong { .. })));
    }

    #[test]
    fn table_names() {
        for ok in ["sqlock_locks", "_t", "order", "a1", &"a".repeat(40)] {
            assert!(TableName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "Abc",
            "a-b",
            "a b",
            "a\"b",
            "a`b",
            "s.t",
            "ä",
            &"a".repeat(41),
        ] {
            assert!(
                matches!(TableName::new(bad), Err(Error::InvalidTableName { .. })),
                "{bad}"
            );
        }
    }
}
