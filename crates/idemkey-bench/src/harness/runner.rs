//! Workers driving an operation for a budget, and pairs of operations alternating in short
//! rounds so that drift (a checkpoint, another process, a warming cache) hits both sides.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::client::Conn;
use super::cpu::Mark;
use super::stats::Samples;

/// How much each side of a workload runs, in total over its rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// Wall time.
    Time(Duration),
    /// Requests (or transactions).
    Requests(u64),
}

impl Budget {
    /// One round's share of the budget (at least one request, or a millisecond).
    pub(crate) fn per_round(self, rounds: u32) -> Self {
        let rounds = rounds.max(1);
        match self {
            Self::Time(total) => Self::Time((total / rounds).max(Duration::from_millis(1))),
            Self::Requests(total) => Self::Requests(total.div_ceil(u64::from(rounds)).max(1)),
        }
    }
}

/// A worker: its connection and what its operations remember between requests.
pub(crate) struct Worker {
    /// Its own keep-alive connection (`None` for operations that talk to the database).
    pub(crate) conn: Option<Conn>,
    /// A second connection, to another target, for [`OnAlt`] operations (the proxy
    /// workloads' API behind the proxy).
    pub(crate) alt: Option<Conn>,
    /// Its index, part of every key it makes.
    pub(crate) id: usize,
    /// Requests it has made, the other part of its keys.
    pub(crate) seq: u64,
    /// Its most recent keys, for retries.
    pub(crate) recent: VecDeque<u64>,
    /// Its random choices, seeded by its index so runs are comparable.
    pub(crate) rng: StdRng,
}

impl Worker {
    /// Worker `id`, on `conn`.
    pub(crate) fn new(id: usize, conn: Option<Conn>) -> Self {
        Self {
            conn,
            alt: None,
            id,
            seq: 0,
            recent: VecDeque::new(),
            rng: StdRng::seed_from_u64(id as u64),
        }
    }

    /// The next sequence number of this worker.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// What a worker does, over and over.
pub(crate) trait Op: Send + Sync + 'static {
    /// How many classes of answers it records apart (the first is the main one).
    fn classes(&self) -> usize {
        1
    }

    /// One request: `Ok(class)` for an expected answer, `Err(status)` otherwise (0: none).
    fn call(&self, worker: &mut Worker) -> impl Future<Output = Result<usize, u16>> + Send;
}

/// `O` sent on each worker's second connection ([`Worker::alt`]) instead of its first.
pub(crate) struct OnAlt<O>(pub(crate) O);

impl<O: Op> Op for OnAlt<O> {
    fn classes(&self) -> usize {
        self.0.classes()
    }

    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        // The runner awaits every call to its end, so the connections are always swapped
        // back.
        std::mem::swap(&mut worker.conn, &mut worker.alt);
        let result = self.0.call(worker).await;
        std::mem::swap(&mut worker.conn, &mut worker.alt);
        result
    }
}

/// Runs `op` on every worker for one round's `budget`; returns one [`Samples`] per class.
pub(crate) async fn round<O: Op>(
    op: &Arc<O>,
    workers: &mut Vec<Worker>,
    budget: Budget,
) -> Vec<Samples> {
    let left = Arc::new(AtomicU64::new(match budget {
        Budget::Requests(n) => n,
        Budget::Time(_) => u64::MAX,
    }));
    let start = Instant::now();
    let cpu = Mark::now();
    let deadline = match budget {
        Budget::Time(time) => start + time,
        Budget::Requests(_) => start + Duration::from_secs(24 * 3600),
    };
    let tasks: Vec<_> = workers
        .drain(..)
        .map(|worker| {
            let (op, left) = (op.clone(), left.clone());
            tokio::spawn(work(op, worker, left, deadline))
        })
        .collect();
    let mut merged = vec![Samples::default(); op.classes()];
    for task in tasks {
        // A worker panics only on a bug in the bench itself: propagate it.
        let (worker, samples) = task
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        workers.push(worker);
        for (into, from) in merged.iter_mut().zip(&samples) {
            into.merge(from);
        }
    }
    let elapsed = start.elapsed();
    for samples in &mut merged {
        samples.elapsed = elapsed;
    }
    // The CPU time of a round of several classes cannot be split between them.
    if let [only] = merged.as_mut_slice() {
        only.cpu = cpu.spent();
    }
    merged
}

async fn work<O: Op>(
    op: Arc<O>,
    mut worker: Worker,
    left: Arc<AtomicU64>,
    deadline: Instant,
) -> (Worker, Vec<Samples>) {
    let classes = op.classes();
    let mut samples = vec![Samples::default(); classes];
    loop {
        let taken = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if taken.is_err() || Instant::now() >= deadline {
            break;
        }
        let start = Instant::now();
        match op.call(&mut worker).await {
            Ok(class) => samples[class.min(classes - 1)].ok(start.elapsed()),
            Err(status) => samples[0].error(status),
        }
    }
    (worker, samples)
}

/// Adds a round's samples to a side's, wall time included.
pub(crate) fn accumulate(side: &mut [Samples], round: &[Samples]) {
    for (into, from) in side.iter_mut().zip(round) {
        into.merge(from);
        into.elapsed += from.elapsed;
        into.cpu += from.cpu;
    }
}

/// What else is measured around each round of a pair, outside the round's own time: the
/// database server's counters (see `dbstatus`).
pub(crate) trait Observer {
    /// Just before a round of side `side` (0: `a`, 1: `b`).
    fn before(&mut self, side: usize) -> impl Future<Output = ()>;
    /// Just after it.
    fn after(&mut self, side: usize) -> impl Future<Output = ()>;
}

/// Observes nothing.
impl Observer for () {
    async fn before(&mut self, _side: usize) {}
    async fn after(&mut self, _side: usize) {}
}

/// Runs `a` and `b` in alternating rounds (a b, b a, a b, ...) on the same workers.
pub(crate) async fn pair<A: Op, B: Op>(
    a: &Arc<A>,
    b: &Arc<B>,
    workers: &mut Vec<Worker>,
    budget: Budget,
    rounds: u32,
    bar: &ProgressBar,
) -> (Vec<Samples>, Vec<Samples>) {
    pair_observed(a, b, workers, (budget, rounds), bar, &mut ()).await
}

/// [`pair`], with `observer` told of each round; `split` is the budget and the rounds.
pub(crate) async fn pair_observed<A: Op, B: Op, O: Observer>(
    a: &Arc<A>,
    b: &Arc<B>,
    workers: &mut Vec<Worker>,
    (budget, rounds): (Budget, u32),
    bar: &ProgressBar,
    observer: &mut O,
) -> (Vec<Samples>, Vec<Samples>) {
    let mut side_a = vec![Samples::default(); a.classes()];
    let mut side_b = vec![Samples::default(); b.classes()];
    let share = budget.per_round(rounds);
    for r in 0..rounds.max(1) {
        for side in [r % 2, 1 - r % 2] {
            observer.before(side as usize).await;
            if side == 0 {
                accumulate(&mut side_a, &round(a, workers, share).await);
            } else {
                accumulate(&mut side_b, &round(b, workers, share).await);
            }
            observer.after(side as usize).await;
        }
        bar.inc(1);
    }
    (side_a, side_b)
}

/// Runs `op` alone, in `rounds` rounds.
pub(crate) async fn single<O: Op>(
    op: &Arc<O>,
    workers: &mut Vec<Worker>,
    budget: Budget,
    rounds: u32,
    bar: &ProgressBar,
) -> Vec<Samples> {
    let mut side = vec![Samples::default(); op.classes()];
    let share = budget.per_round(rounds);
    for _ in 0..rounds.max(1) {
        accumulate(&mut side, &round(op, workers, share).await);
        bar.inc(1);
    }
    side
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_split_into_rounds() {
        assert_eq!(Budget::Requests(50).per_round(10), Budget::Requests(5));
        assert_eq!(Budget::Requests(3).per_round(10), Budget::Requests(1));
        let time = Budget::Time(Duration::from_secs(10)).per_round(10);
        assert_eq!(time, Budget::Time(Duration::from_secs(1)));
    }
}
