//! `sqlock elect`: a long-lived command run while this process leads an election, and
//! `sqlock leader`: who leads one.
//!
//! `elect` campaigns, then starts the command with the term in its environment and
//! supervises it as `sqlock run` does (the same [`start`] and [`supervise`]): signals
//! are passed on to its process group, a lost leadership stops the whole group, and
//! the watcher kills it should sqlock die. When the command ends, sqlock resigns at
//! once, so the next candidate gets in without waiting for the TTL. With `--again`, a
//! lost leadership is not the end: sqlock campaigns again, and starts the command
//! anew in its next term.

use sqlock::{Leader, Leadership, Locker};

use crate::args::ElectArgs;
use crate::duration::human;
use crate::failure::Failure;
use crate::run::{start, supervise, Signals, Supervised};
use crate::show::{print_fields, printable, utc};
use crate::watcher::Watcher;

pub(crate) async fn elect(locker: &Locker, args: ElectArgs) -> Result<i32, Failure> {
    let mut signals = Signals::new()?;
    let id = args.id.clone().unwrap_or_else(default_id);
    let election = locker.election(&args.name).id(id.clone()).ttl(args.ttl);
    loop {
        // For the service's log (stderr; stdout is the command's): who waits, who leads.
        eprintln!("sqlock: campaigning in election {:?} as {id:?}", args.name);
        // Before the leadership: no command runs without a watcher.
        let mut watcher = Watcher::start()?;
        // A signal while campaigning gives up: the campaign is cancel safe, so nothing
        // stays taken. The status is what the signal would have made it.
        let leadership = tokio::select! {
            leadership = election.campaign() => leadership?,
            sig = signals.recv() => return Ok(128 + sig as i32),
        };
        eprintln!(
            "sqlock: leading election {:?} in term {}",
            args.name,
            leadership.term()
        );
        let tree = match start(&args.command, &leader_env(&leadership), &mut watcher).await {
            Ok(tree) => tree,
            Err(failure) => {
                // Nothing runs: let the next candidate in at once.
                let _ = leadership.resign().await;
                return Err(failure);
            }
        };
        let mut lost = leadership.lost();
        match supervise(tree, watcher, &mut lost, &mut signals).await {
            Supervised::Exited { status, .. } => {
                return finish(leadership, &args.name, status).await
            }
            Supervised::Lost(reason) => {
                let term = leadership.term();
                // No longer ours: this only ends the leadership's bookkeeping.
                let _ = leadership.resign().await;
                let text = format!(
                    "leadership of election {:?} (term {term}) was lost while the command \
                     ran ({reason}); the command and its processes were stopped",
                    args.name
                );
                if !args.again {
                    return Err(Failure::Lost(text));
                }
                eprintln!("sqlock: {text}");
            }
        }
    }
}

/// The default identity: this host's name and sqlock's pid.
fn default_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// The term, for the command's environment.
fn leader_env(l: &Leadership) -> Vec<(&'static str, String)> {
    vec![
        ("SQLOCK_ELECTION", l.name().to_owned()),
        ("SQLOCK_LEADER_ID", l.identity().to_owned()),
        ("SQLOCK_TERM", l.term().to_string()),
        ("SQLOCK_KEY", l.key().to_owned()),
        ("SQLOCK_OWNER", l.owner().to_string()),
        ("SQLOCK_FENCING_TOKEN", l.term().to_string()),
    ]
}

/// Resigns after the command's group ended. The command's status is the answer,
/// unless leadership turned out lost before the resignation.
async fn finish(leadership: Leadership, name: &str, status: i32) -> Result<i32, Failure> {
    let was_lost = leadership.is_lost();
    let term = leadership.term();
    let still_leading = match leadership.resign().await {
        Ok(still) => still,
        Err(e) => {
            // The renewals vouched for the leadership while the command ran (or the
            // lost signal would have fired): only the resignation is missing.
            eprintln!(
                "sqlock: could not resign from election {name:?}, its lease lapses at its \
                 expiry: {e}"
            );
            true
        }
    };
    if was_lost || !still_leading {
        return Err(Failure::Lost(format!(
            "leadership of election {name:?} (term {term}) was lost before the resignation"
        )));
    }
    Ok(status)
}

/// `leader NAME [--json]`: who leads the election now. No leader is exit 75, after
/// `{"election": NAME, "leader": null}` with `--json`.
pub(crate) async fn leader(locker: &Locker, name: &str, json: bool) -> Result<i32, Failure> {
    let leader = locker.election(name).leader().await?;
    match (&leader, json) {
        (Some(l), true) => println!("{}", to_json(name, Some(l))),
        (None, true) => println!("{}", to_json(name, None)),
        (Some(l), false) => print_leader(name, l),
        (None, false) => {}
    }
    match leader {
        Some(_) => Ok(0),
        None => Err(Failure::NotHeld(format!("election {name:?} has no leader"))),
    }
}

fn to_json(name: &str, l: Option<&Leader>) -> serde_json::Value {
    match l {
        None => serde_json::json!({ "election": name, "leader": null }),
        Some(l) => serde_json::json!({
            "election": name,
            "leader": l.identity,
            "term": l.term,
            "owner": l.owner,
            "held_since": l.since.to_rfc3339(),
            "expires_at": l.expires_at.to_rfc3339(),
            "expires_in_ms": u64::try_from(l.expires_in.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

fn print_leader(name: &str, l: &Leader) {
    print_fields(&[
        ("election", printable(name)),
        ("leader", printable(&l.identity)),
        ("term", l.term.to_string()),
        ("owner", l.owner.clone()),
        ("held since", utc(l.since)),
        (
            "expires",
            format!("{}, in {}", utc(l.expires_at), human(l.expires_in)),
        ),
    ]);
}
