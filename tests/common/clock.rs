//! The fault servers' clock: both fault server instances run under libfaketime, which
//! reads their offset from the true time from one file on every clock call
//! (`scripts/fault-db.sh` sets this up). Writing the file moves both clocks at once;
//! the monotonic clock, which the history checker uses, is left alone.

use std::time::Duration;

/// The offset file (`CLOCK_FILE` in `scripts/fault-db.sh`).
pub const OFFSET_FILE: &str = "/var/lib/sqlock-fault-clock/offset";

/// Sets the fault servers' clock `offset_s` seconds off the true time. The file is
/// replaced whole, so a server never reads half of it.
pub fn set(offset_s: i64) -> anyhow::Result<()> {
    let tmp = format!("{OFFSET_FILE}.{}", std::process::id());
    std::fs::write(&tmp, format!("{offset_s:+}\n"))?;
    std::fs::rename(&tmp, OFFSET_FILE)?;
    Ok(())
}

/// Puts the true time back when dropped, however the test ends.
#[derive(Debug)]
pub struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        let _ = set(0);
    }
}

/// How long a server takes at most to see a new offset: libfaketime reads the file on
/// every clock call, so this is only scheduling slack.
pub const SEEN_WITHIN: Duration = Duration::from_millis(200);
