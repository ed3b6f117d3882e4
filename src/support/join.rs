//! Futures run side by side in the caller's task, each to its end: what a quorum lock
//! sends to its databases at once, without a task per database.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Runs every future of `futures` at once, in the caller's task, until each has
/// finished: their outputs, in the order given.
///
/// Cancel safe as the futures are: dropped, it drops those not finished yet, and the
/// outputs of those that had.
pub(crate) async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut running: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = running.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in running.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(done) => *output = Some(done),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    // Every one is `Some` by now.
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::join_all;

    #[tokio::test(start_paused = true)]
    async fn every_future_runs_at_once_and_answers_in_order() {
        let started = tokio::time::Instant::now();
        let outputs = join_all([30u64, 10, 20].map(|ms| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ms
        }))
        .await;
        assert_eq!(outputs, [30, 10, 20]);
        // Side by side: as long as the longest, not the sum.
        assert_eq!(started.elapsed(), Duration::from_millis(30));
        assert!(join_all(Vec::<std::future::Ready<()>>::new())
            .await
            .is_empty());
    }
}
